"""RetNet's multi-scale retention: a linear-attention state decayed by a fixed gamma_h per head.

``retention(q, k, v, scale=None, backend="auto")``: ``"fla"`` (flash-linear-attention's
``chunk_retention``), ``"fla_recurrent"`` (its ``fused_recurrent_retention``), ``"naive"``
(``naive.retention_naive``, the PyTorch recurrence) or ``"auto"`` (for CUDA tensors where fla imports, its
chunks, or its fused recurrence where the chunks are unreliable, see ``zoo.kernels.backend.fla_path``; else
the PyTorch recurrence). fla's ops hard-code the decays of ``naive.retention_log_decay``.
``zoo.kernels.backend.last_backend("retention")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import FLA_RECURRENT, NAIVE, check_backend, fla_path, record
from zoo.kernels.retention.naive import retention_naive

BACKENDS = ("auto", "fla", FLA_RECURRENT, NAIVE)


def retention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
              backend: str = "auto") -> torch.Tensor:
    """q, k: [B, T, H, K]; v: [B, T, H, V] -> o: [B, T, H, V]; scale K ** -0.5 when None."""
    check_backend(backend, BACKENDS)
    fla, used = fla_path(backend, "fla.ops.retention", q, "retnet on GPU (falls back to the PyTorch recurrence)")
    record("retention", used)
    if fla is None:
        return retention_naive(q, k, v, scale)
    if used == FLA_RECURRENT:
        return fla.fused_recurrent_retention(q=q, k=k, v=v, scale=scale)[0]
    return fla.chunk_retention(q=q, k=k, v=v, scale=scale)[0]


__all__ = ["retention", "BACKENDS"]
