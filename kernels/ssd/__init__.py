"""Mamba-2's SSD scan: scalar-per-head decay, one group of B and C.

``ssd(x, dt, A, B, C, D=None, backend="auto")``: ``"compiled"`` (``compiled.py``, the chunked form through
``torch.compile``), ``"chunked"`` (``chunked.py``, the chunked algorithm in batched matmuls, eager), ``"naive"``
(``naive.py``, the exact quadratic form) or ``"auto"``: compiled for CUDA tensors (the eager chunked form where
compiling fails, said once; inside a model that is compiled as a whole, the chunked form, which that compile
fuses), the quadratic form elsewhere. ``zoo.kernels.backend.last_backend("ssd")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import CHUNKED, NAIVE, check_backend, named_or_gpu, record
from zoo.kernels.ssd.chunked import ssd_chunked
from zoo.kernels.ssd.compiled import ssd_compiled
from zoo.kernels.ssd.naive import ssd_naive

COMPILED = "compiled"
BACKENDS = ("auto", COMPILED, CHUNKED, NAIVE)


def ssd(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
        D: torch.Tensor | None = None, backend: str = "auto") -> torch.Tensor:
    """x: [Bt, L, H, P]; dt: [Bt, L, H] positive; A: [H] negative; B, C: [Bt, L, N]; D: [H], the skip D_h x_t, or
    None -> y: [Bt, L, H, P] in x's dtype."""
    check_backend(backend, BACKENDS)
    if backend == COMPILED or (backend == "auto" and x.is_cuda):  # not on a CPU: there it would time the C++ compiler
        y = ssd_compiled(x, dt, A, B, C, D, fallback=backend == "auto")
        if y is not None:
            record("ssd", COMPILED)
            return y
    chunked = named_or_gpu(backend, CHUNKED, x)
    record("ssd", CHUNKED if chunked else NAIVE)
    return ssd_chunked(x, dt, A, B, C, D) if chunked else ssd_naive(x, dt, A, B, C, D)


__all__ = ["ssd", "BACKENDS"]
