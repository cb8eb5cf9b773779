"""One optimiser step (forward, loss, backward, clip, update) for a group of models, optionally replayed
from one CUDA graph (``zoo.graphs``).

A group is G member models that see the same batch, each with its own optimiser (the runs of one
sweep cell that differ only in learning rate). G = 1 is an ordinary run. Members never share a
tensor they write, so one member's NaN cannot reach another. The graph updates the parameters in
place, so evaluation, logging and checkpoints see the models as usual.

Shapes: inputs (B, N) int64; positions, targets (B, K) int64 (targets -100 where no loss).
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import torch

from zoo.graphs import GroupCall
from zoo.tasks.base import IGNORE_INDEX


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
            # the cause, not dynamo's advice on how to see it: e.g. "BackendCompilerFailed: backend='inductor'
            # raised: / <the backend's error> / Set TORCHDYNAMO_VERBOSE=1 ..."
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            lines = [line for line in lines if not line.startswith(("Set TORCHDYNAMO_VERBOSE", "You can suppress"))]
            print(f"zoo: torch.compile failed for this model, running it uncompiled ({type(err).__name__}: "
                  f"{' / '.join(lines[:4])})", flush=True)
            self.forward = self.model
            return self.model(inputs, positions)

    def labelled_logits(self, inputs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits (B, K, V) at the labelled ``positions`` (B, K) only, in the head's dtype (bf16 under autocast)."""
        return self.model.logits(self.hidden(inputs, positions))


class TrainStep(GroupCall):
    """Callable ``step(inputs, positions, targets) -> losses`` ((G,) device tensor, not synchronised).

    Args:
        members: the group; optimisers built with ``capturable=True`` (and tensor lrs) when ``graphs`` is on.
        bf16: autocast the forward pass to bfloat16.
        grad_clip: max global gradient norm per member, or None.
        graphs: record and replay CUDA graphs (CUDA only).
    """

    doing = "training"

    def __init__(self, members: list[Member], bf16: bool, grad_clip: float | None, graphs: bool):
        super().__init__(members, graphs)
        self.bf16, self.grad_clip = bf16, grad_clip
        self.losses = None  # (G,) the last step's losses; inactive members keep their last value
        self.loss_sums = None  # (G,) running sums of this epoch's losses: NaN or inf anywhere stays visible

    def member_call(self, i: int, inputs, positions, targets) -> None:
        m = self.members[i]
        with autocast_bf16(inputs.device, self.bf16):  # the head's matmul in bf16; the loss's math is float32
            loss = m.model.loss(m.hidden(inputs, positions), targets, IGNORE_INDEX)
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

    def eager_member_call(self, i: int, inputs, positions, targets) -> None:
        """Each member draws its random numbers (dropout) from its own stream, so it trains exactly as it would
        alone. (Inside a CUDA graph the members share the device's stream.)"""
        m = self.members[i]
        cuda = inputs.is_cuda
        if m.rng_state is not None:
            (torch.cuda.set_rng_state if cuda else torch.set_rng_state)(m.rng_state)
        self.member_call(i, inputs, positions, targets)
        if m.rng_state is not None:
            m.rng_state = torch.cuda.get_rng_state() if cuda else torch.get_rng_state()

    def __call__(self, inputs, positions, targets) -> torch.Tensor:
        if self.loss_sums is None:
            self.losses = torch.zeros(len(self.members), device=inputs.device)
            self.loss_sums = torch.zeros(len(self.members), device=inputs.device)
        self.run(inputs, positions, targets)
        return self.losses

    def take_epoch_loss_sums(self) -> torch.Tensor | None:
        """This epoch's summed losses per member (G,), and start new sums."""
        total = self.loss_sums
        if total is not None:
            total = total.clone()
            self.loss_sums.zero_()
        return total


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
