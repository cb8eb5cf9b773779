"""One optimiser step (forward, loss, backward, clip, update) for a group of models, optionally replayed
from one CUDA graph.

A group is G member models that see the same batch, each with its own optimiser (the runs of one
sweep cell that differ only in learning rate). G = 1 is an ordinary run. Members never share a
tensor they write, so one member's NaN cannot reach another.

Tiny models leave the GPU idle behind Python: one step is a few hundred small kernels whose launches
cost more than their work. On CUDA, ``TrainStep`` records the step of every active member once per
batch shape into one CUDA graph, each member on its own stream inside the graph (fork, then join), so
a replay costs one launch and the members' kernels run side by side on the GPU. The graph reads its
batch from static buffers and updates the parameters in place, so evaluation, logging and checkpoints
see the models as usual. When a member stops (early stop, divergence) the graphs are dropped and
recorded again for the members still training. On CPU (or with ``graphs=False``) the members step
one after the other, eagerly.

Shapes: inputs (B, N) int64; positions, targets (B, K) int64 (targets -100 where no loss).
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import torch

from zoo.kernels.cross_entropy import cross_entropy
from zoo.tasks.base import IGNORE_INDEX

WARMUP_STEPS = 3  # eager steps per new shape before recording (lets cuBLAS/cuDNN pick and allocate)


def autocast_bf16(device: torch.device, enabled: bool):
    """bf16 autocast on ``device`` (without its weight cache, which CUDA graphs cannot hold), or nothing."""
    if not enabled:
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)


@dataclass
class Member:
    """One model of a group: ``forward`` runs ``model`` (maybe compiled); ``optimizer`` updates it."""

    model: torch.nn.Module
    forward: Callable
    optimizer: torch.optim.Optimizer
    rng_state: torch.Tensor | None = None  # the member's own CPU/CUDA random stream (dropout), eager steps

    def hidden(self, inputs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(B, N) -> (B, K, D) at ``positions`` (B, K) through ``forward``. A compiled forward compiles on its first
        call (of each shape and mode); if that fails, the member says so once and runs its model uncompiled from
        then on."""
        try:
            return self.forward(inputs, positions)
        except Exception as err:  # noqa: BLE001 - torch.compile raises many kinds; the eager call re-raises real errors
            if self.forward is self.model:
                raise
            lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [""]
            print(f"zoo: torch.compile failed for this model, running it uncompiled ({type(err).__name__}: "
                  f"{lines[0]}{' ... ' + lines[-1] if len(lines) > 1 else ''})", flush=True)
            self.forward = self.model
            return self.model(inputs, positions)

    def labelled_logits(self, inputs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits (B, K, V) at the labelled ``positions`` (B, K) only, in the head's dtype (bf16 under autocast)."""
        return self.model.logits(self.hidden(inputs, positions))


class TrainStep:
    """Callable ``step(inputs, positions, targets) -> losses`` ((G,) device tensor, not synchronised).

    Args:
        members: the group; optimisers built with ``capturable=True`` (and tensor lrs) when ``graphs`` is on.
        bf16: autocast the forward pass to bfloat16.
        grad_clip: max global gradient norm per member, or None.
        graphs: record and replay CUDA graphs (CUDA only).
    """

    def __init__(self, members: list[Member], bf16: bool, grad_clip: float | None, graphs: bool):
        self.members, self.bf16, self.grad_clip, self.graphs = members, bf16, grad_clip, graphs
        self.active = [True] * len(members)
        self.losses = None  # (G,) the last step's losses; inactive members keep their last value
        self.loss_sums = None  # (G,) running sums of this epoch's losses: NaN or inf anywhere stays visible
        self.recorded: dict[tuple, tuple] = {}  # (shape, active members) -> (graph, static inputs)
        self.seen: dict[tuple, int] = {}
        self.pool = None
        # The caching allocator reuses a freed block only on the stream that allocated it, so warm-up steps and
        # captures on a fresh stream each time (PyTorch hands out up to 32 in turn) reserve a step's memory per
        # stream. Seen on an H100 (MQAR N=128, d=512, groups of 4, three workers): one worker held 32 GiB reserved
        # but unallocated while the others ran out of memory. So each TrainStep keeps one side stream (warm-ups,
        # captures) and one stream per member.
        self.side_stream = None
        self.member_streams: list | None = None

    def deactivate(self, index: int) -> None:
        """Stop training member ``index`` (its parameters no longer change); graphs are recorded anew."""
        if self.active[index]:
            self.active[index] = False
            recorded = bool(self.recorded)
            self._drop_graphs()
            if recorded:  # the dropped graphs' pool is only cache now: give it back to the GPU's other workers
                torch.cuda.empty_cache()

    def _drop_graphs(self) -> None:
        """Forget every graph and their memory pool: the pool dies with its last graph, and recording into a
        dead pool fails (PyTorch 2.11: ``use_count > 0 INTERNAL ASSERT FAILED`` in CUDACachingAllocator)."""
        self.recorded.clear()
        self.seen.clear()
        self.pool = None

    def _member_step(self, i: int, inputs, positions, targets) -> None:
        m = self.members[i]
        with autocast_bf16(inputs.device, self.bf16):
            logits = m.labelled_logits(inputs, positions)
        loss = cross_entropy(logits.flatten(0, 1), targets.flatten(), IGNORE_INDEX)  # float32 math on any logits
        loss.backward()
        if self.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(m.model.parameters(), self.grad_clip, foreach=True)
        m.optimizer.step()
        # None, not zeros, in a graph too: the next backward then hands each gradient to its parameter as it is,
        # where zeroed gradients cost a fill and an add per parameter every step (inside a capture the
        # gradients live in the graph's pool, at the same addresses on every replay)
        m.optimizer.zero_grad(set_to_none=True)
        loss = loss.detach()
        self.losses[i].copy_(loss)
        self.loss_sums[i].add_(loss)

    def _eager(self, inputs, positions, targets) -> None:
        """Members one after the other; each draws its random numbers (dropout) from its own stream, so it
        trains exactly as it would alone. (Inside a CUDA graph the members share the device's stream.)"""
        cuda = inputs.is_cuda
        for i, on in enumerate(self.active):
            if not on:
                continue
            m = self.members[i]
            if m.rng_state is not None:
                (torch.cuda.set_rng_state if cuda else torch.set_rng_state)(m.rng_state)
            self._member_step(i, inputs, positions, targets)
            if m.rng_state is not None:
                m.rng_state = torch.cuda.get_rng_state() if cuda else torch.get_rng_state()

    def _forked(self, inputs, positions, targets) -> None:
        """Every active member on its own stream, joined back into the current one (for graph capture)."""
        main = torch.cuda.current_stream()
        if self.member_streams is None:
            self.member_streams = [torch.cuda.Stream() for _ in self.members]
        streams = []
        for i, on in enumerate(self.active):
            if on:
                stream = self.member_streams[i]
                stream.wait_stream(main)
                with torch.cuda.stream(stream):
                    self._member_step(i, inputs, positions, targets)
                streams.append(stream)
        for stream in streams:
            main.wait_stream(stream)

    def _side(self):
        """The side stream of warm-up steps and captures, one for the life of this TrainStep."""
        if self.side_stream is None:
            self.side_stream = torch.cuda.Stream()
        return self.side_stream

    def _record(self, key, inputs, positions, targets):
        """Capture the step into a new graph, as ``torch.cuda.graph`` does but without its ``empty_cache()``:
        emptying the cache after the first graph was recorded made that graph's replays crash (SIGSEGV, or an
        illegal address in its kernels) on an H100 with torch 2.11, in groups of 2+ members that record a second
        batch shape; ``results/graph_replay_crash.md`` has the experiments."""
        static = (inputs.clone(), positions.clone(), targets.clone())
        graph = torch.cuda.CUDAGraph()
        capture = self._side()  # capture cannot run on the default stream
        capture.wait_stream(torch.cuda.current_stream())
        torch.cuda.synchronize()
        with torch.cuda.stream(capture):
            graph.capture_begin(*(() if self.pool is None else (self.pool,)))
            try:
                self._forked(*static)
            finally:
                graph.capture_end()
        torch.cuda.current_stream().wait_stream(capture)
        self.pool = graph.pool()
        self.recorded[key] = (graph, static)

    def __call__(self, inputs, positions, targets) -> torch.Tensor:
        if self.loss_sums is None:
            self.losses = torch.zeros(len(self.members), device=inputs.device)
            self.loss_sums = torch.zeros(len(self.members), device=inputs.device)
        if not (self.graphs and inputs.is_cuda):
            self._eager(inputs, positions, targets)
            return self.losses
        key = (tuple(inputs.shape), tuple(positions.shape), tuple(self.active))
        if key not in self.recorded:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] <= WARMUP_STEPS:  # on a side stream, as graph capture requires
                side = self._side()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self._eager(inputs, positions, targets)
                torch.cuda.current_stream().wait_stream(side)
                return self.losses
            try:
                self._record(key, inputs, positions, targets)
            except RuntimeError as err:  # a mixer that syncs with the host or allocates per call
                print(f"zoo: CUDA graph capture failed, training eagerly ({str(err).splitlines()[0]})")
                self.graphs = False
                self._drop_graphs()
                torch.cuda.synchronize()
                _release_generator_from_capture(inputs.device)
                self._eager(inputs, positions, targets)
                return self.losses
        graph, static = self.recorded[key]
        for buffer, value in zip(static, (inputs, positions, targets)):
            buffer.copy_(value)
        graph.replay()
        return self.losses

    def take_epoch_loss_sums(self) -> torch.Tensor | None:
        """This epoch's summed losses per member (G,), and start new sums."""
        total = self.loss_sums
        if total is not None:
            total = total.clone()
            self.loss_sums.zero_()
        return total


def _release_generator_from_capture(device: torch.device) -> None:
    """A capture that failed half-way leaves the device's random generator marked as capturing, and every
    later random op outside a graph (dropout) raises "Offset increment outside graph capture encountered
    unexpectedly". A fresh copy of its state (same seed and offset, not capturing) lets eager steps go on."""
    generator = torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
    generator.graphsafe_set_state(generator.clone_state())


def build_optimizer(model: torch.nn.Module, train_cfg, cuda: bool, graphs: bool) -> torch.optim.Optimizer:
    """AdamW of a run config's ``train`` section; a tensor lr and capturable state for CUDA graphs.

    ``decay_params``: "all" decays every parameter (Zoology); "matrices" spares biases, norms, embeddings."""
    t = train_cfg
    if t.decay_params == "all":
        groups = [{"params": list(model.parameters()), "weight_decay": t.weight_decay}]
    else:
        decay, rest = [], []
        for name, p in model.named_parameters():
            (decay if p.ndim >= 2 and "embed" not in name else rest).append(p)
        groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    device = next(model.parameters()).device
    lr = torch.tensor(t.lr, device=device) if graphs else t.lr  # a graph reads lr from memory
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(t.betas), fused=cuda, capturable=graphs)


def lr_factor(train_cfg, steps_per_epoch: int) -> Callable[[int], float]:
    """The lr multiplier at each step: linear warm-up, then cosine decay to ``min_lr_ratio``."""
    t = train_cfg
    total = max(1, t.max_epochs * steps_per_epoch)
    warmup = int(t.warmup_epochs * steps_per_epoch)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
