"""One optimiser step (forward, loss, backward, clip, update), optionally replayed from a CUDA graph.

Tiny models leave the GPU idle behind Python: one step is a few hundred small kernels whose
launches cost more than their work. On CUDA, ``TrainStep`` records the whole step once per batch
shape into a CUDA graph and then replays it, so a step costs one launch. The recorded step reads
its batch from static buffers and updates the same parameters in place, so evaluation, logging
and checkpoints see the model as usual. On CPU (or with ``graphs=False``) the step runs eagerly.

Shapes: inputs (B, N) int64; positions, targets (B, K) int64 (targets -100 where no loss).
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import torch
import torch.nn.functional as F

from zoo.data import IGNORE

WARMUP_STEPS = 3  # eager steps per new shape before recording (lets cuBLAS/cuDNN pick and allocate)


def autocast_bf16(device: torch.device, enabled: bool):
    """bf16 autocast on ``device`` (without its weight cache, which CUDA graphs cannot hold), or nothing."""
    if not enabled:
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)


def labelled_logits(model, forward: Callable, inputs, positions) -> torch.Tensor:
    """Logits (B, K, V) in fp32 at the labelled ``positions`` only."""
    hidden = forward(inputs)
    picked = hidden.gather(1, positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
    return model.logits(picked).float()


class TrainStep:
    """Callable ``step(inputs, positions, targets) -> loss`` (a device scalar, not synchronised).

    Args:
        model: the ``LanguageModel``; ``forward`` is the callable that runs it (maybe compiled).
        optimizer: built with ``capturable=True`` (and a tensor lr) when ``graphs`` is on.
        bf16: autocast the forward pass to bfloat16.
        grad_clip: max global gradient norm, or None.
        graphs: record and replay CUDA graphs (CUDA only).
    """

    def __init__(self, model, forward: Callable, optimizer: torch.optim.Optimizer, bf16: bool,
                 grad_clip: float | None, graphs: bool):
        self.model, self.forward, self.optimizer = model, forward, optimizer
        self.bf16, self.grad_clip, self.graphs = bf16, grad_clip, graphs
        self.loss_sum = None  # running sum of this epoch's losses: NaN or inf anywhere stays visible
        self.recorded: dict[tuple, tuple] = {}  # shape -> (graph, static inputs, static loss)
        self.seen: dict[tuple, int] = {}
        self.pool = None

    def _eager(self, inputs, positions, targets) -> torch.Tensor:
        with autocast_bf16(inputs.device, self.bf16):
            logits = labelled_logits(self.model, self.forward, inputs, positions)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        loss.backward()
        if self.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip, foreach=True)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=not self.graphs)
        loss = loss.detach()
        self.loss_sum.add_(loss)
        return loss

    def _record(self, key, inputs, positions, targets):
        static = (inputs.clone(), positions.clone(), targets.clone())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            loss = self._eager(*static)
        self.pool = graph.pool()
        self.recorded[key] = (graph, static, loss)

    def __call__(self, inputs, positions, targets) -> torch.Tensor:
        if self.loss_sum is None:
            self.loss_sum = torch.zeros((), device=inputs.device)
        if not (self.graphs and inputs.is_cuda):
            return self._eager(inputs, positions, targets)
        key = (tuple(inputs.shape), tuple(positions.shape))
        if key not in self.recorded:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] <= WARMUP_STEPS:  # on a side stream, as graph capture requires
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    loss = self._eager(inputs, positions, targets)
                torch.cuda.current_stream().wait_stream(side)
                return loss
            try:
                self._record(key, inputs, positions, targets)
            except RuntimeError as err:  # a mixer that syncs with the host or allocates per call
                print(f"zoo: CUDA graph capture failed, training eagerly ({str(err).splitlines()[0]})")
                self.graphs = False
                torch.cuda.synchronize()
                return self._eager(inputs, positions, targets)
        graph, static, loss = self.recorded[key]
        for buffer, value in zip(static, (inputs, positions, targets)):
            buffer.copy_(value)
        graph.replay()
        return loss

    def take_epoch_loss_sum(self) -> torch.Tensor | None:
        """This epoch's summed loss (for the divergence check), and start a new sum."""
        total = self.loss_sum
        if total is not None:
            total = total.clone()
            self.loss_sum.zero_()
        return total
