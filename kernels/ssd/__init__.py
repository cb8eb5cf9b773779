"""Mamba-2's SSD scan: scalar-per-head decay, one group of B and C.

``ssd(x, dt, A, B, C, D=None, backend="auto")``: ``"triton"`` (``fused.py``: a Triton forward that carries the state
from chunk to chunk in registers, and a backward in three kernels), ``"compiled"`` (``compiled.py``, the chunked
form through ``torch.compile``), ``"chunked"`` (``chunked.py``, the chunked algorithm in batched matmuls, eager),
``"naive"`` (``naive.py``, the exact quadratic form) or ``"auto"``: the Triton kernels for CUDA tensors, the quadratic
form elsewhere. ``zoo.kernels.backend.last_backend("ssd")`` says which ran.

The Triton kernels replaced the compiled chunked form as the GPU path: on one H100 (torch 2.11, Triton 3.6, bf16,
MQAR's figure-2 cell, B=256, L=256, d_model=128) one layer's SSD forward + backward took 0.84 to 1.07 ms against the
compiled form's 2.19 (``python -m zoo.kernels.bench --ssd``), and Mamba-2's training step 4.09 ms against 6.06
(``python -m zoo.bench.step``; ``results/SPEED.md``).
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import CHUNKED, NAIVE, check_backend, record, recorded_path
from zoo.kernels.ssd.chunked import ssd_chunked
from zoo.kernels.ssd.compiled import ssd_compiled
from zoo.kernels.ssd.naive import ssd_naive

COMPILED = "compiled"
TRITON = "triton"
BACKENDS = ("auto", TRITON, COMPILED, CHUNKED, NAIVE)


def ssd(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
        D: torch.Tensor | None = None, backend: str = "auto") -> torch.Tensor:
    """x: [Bt, L, H, P]; dt: [Bt, L, H] positive; A: [H] negative; B, C: [Bt, L, N]; D: [H], the skip D_h x_t, or
    None -> y: [Bt, L, H, P] in x's dtype."""
    check_backend(backend, BACKENDS)
    if backend == COMPILED:  # named only: "auto" runs the Triton kernels on a GPU
        y = ssd_compiled(x, dt, A, B, C, D, fallback=False)
        record("ssd", COMPILED)
        return y
    if backend in ("auto", TRITON):
        fused = recorded_path("ssd", backend, TRITON, "zoo.kernels.ssd.fused", x,
                              "ssd on GPU (the quadratic form runs instead)")
        if fused is not None:
            return fused.ssd_fused(x, dt, A, B, C, D)
    chunked = backend == CHUNKED
    record("ssd", CHUNKED if chunked else NAIVE)
    return ssd_chunked(x, dt, A, B, C, D) if chunked else ssd_naive(x, dt, A, B, C, D)


__all__ = ["ssd", "BACKENDS"]
