"""RetNet's multi-scale retention: a linear-attention state decayed by a fixed gamma_h per head.

``retention(q, k, v, scale=None, backend="auto")``: ``"fla"`` (flash-linear-attention's
``chunk_retention``), ``"naive"`` (``naive.retention_naive``, the PyTorch recurrence) or ``"auto"`` (fla
for CUDA tensors where it imports and works on this GPU, else the recurrence; see
``zoo.kernels.backend.FLA_CHUNK_MODULES_BROKEN_ON_HOPPER``). ``zoo.kernels.backend.last_backend("retention")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, fast_path, record
from zoo.kernels.retention.naive import retention_naive

BACKENDS = ("auto", "fla", NAIVE)


def retention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
              backend: str = "auto") -> torch.Tensor:
    """q, k: [B, T, H, K]; v: [B, T, H, V] -> o: [B, T, H, V]; scale K ** -0.5 when None."""
    check_backend(backend, BACKENDS)
    fla = fast_path(backend, "fla", "fla.ops.retention", q, "retnet on GPU (falls back to the PyTorch recurrence)")
    record("retention", NAIVE if fla is None else "fla")
    if fla is None:
        return retention_naive(q, k, v, scale)
    o, _ = fla.chunk_retention(q=q, k=k, v=v, scale=scale)
    return o


__all__ = ["retention", "BACKENDS"]
