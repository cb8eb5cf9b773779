"""``ssd_chunked`` through ``torch.compile``: ``zoo.kernels.ssd``'s ``backend="compiled"``, its GPU path before the
Triton kernels of ``fused.py``, which are 2 to 2.6 times faster (``results/SPEED.md``).

Most of the chunked form's GPU time is PyTorch's elementwise kernels and reductions around its batched matmuls (the
decays, the causal mask, the casts, and their gradients), not the matmuls. On an H100 (torch 2.11, Triton 3.6), one
epoch of Mamba-2 at MQAR's figure-2 cell (B=256, L=256, d_model=128: 4 heads of 64, N=128, chunks of 64; bf16, CUDA
graphs) spent 3.77 s of its 5.20 s of GPU time in them. Inductor fuses them into a few kernels around the same
matmuls: in one step bench on that GPU, Mamba-2's training step went from 13.45 ms with the eager chunked form to
6.60 ms with this one (softmax attention's step: 1.68 ms).

The math is ``ssd_chunked``'s; fused kernels may round differently. It compiles once per input shape and dtype
(``dynamic=False``: a run sees its training and evaluation batch shapes), on first use, which takes seconds on a CPU
and tens of seconds on a GPU machine. The training loop resets the compiled code at each new group (``zoo.run``),
so a worker that trains many shapes stays under dynamo's recompile limit.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import Compiled
from zoo.kernels.ssd.chunked import ssd_chunked

SSD_COMPILED = Compiled(ssd_chunked, "the SSD scan")


def ssd_compiled(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                 D: torch.Tensor | None = None, fallback: bool = True, compiler: str = "inductor"
                 ) -> torch.Tensor | None:
    """``ssd_chunked(x, dt, A, B, C, D)`` compiled (``compiler``: torch.compile's backend; shapes as there), or None
    where compiling failed and ``fallback`` is set (``zoo.kernels.backend.Compiled``)."""
    return SSD_COMPILED(x, dt, A, B, C, D, fallback=fallback, compiler=compiler)
