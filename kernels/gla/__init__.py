"""Gated linear attention: a linear-attention state decayed by a per-key-channel forget gate.

``gla(q, k, v, g, scale=None, backend="auto")``: ``"fla"`` (flash-linear-attention's ``chunk_gla``),
``"fla_recurrent"`` (its ``fused_recurrent_gla``), ``"naive"`` (``naive.gla_recurrent``, the PyTorch
recurrence) or ``"auto"`` (for CUDA tensors where fla imports, its chunks, or its fused recurrence where the
chunks are unreliable, see ``zoo.kernels.backend.fla_path``; else the PyTorch recurrence). Used
by ``gla`` and ``hgrn2`` (keys tied to the forget gate); ``zoo.kernels.retention`` is the same recurrence with
a fixed decay per head. ``zoo.kernels.backend.last_backend("gla")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import FLA_RECURRENT, NAIVE, check_backend, fla_path, record
from zoo.kernels.gla.naive import gla_recurrent

BACKENDS = ("auto", "fla", FLA_RECURRENT, NAIVE)


def gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, scale: float | None = None,
        backend: str = "auto") -> torch.Tensor:
    """q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H, K] log forget gates (<= 0); scale: K ** -0.5 when
    None -> o: [B, T, H, V]."""
    check_backend(backend, BACKENDS)
    fla, used = fla_path(backend, "fla.ops.gla", q, "gla on GPU (falls back to the PyTorch recurrence)")
    record("gla", used)
    if fla is None:
        return gla_recurrent(q, k, v, g, scale)
    if used == FLA_RECURRENT:
        return fla.fused_recurrent_gla(q=q, k=k, v=v, gk=g, scale=scale)[0]
    return fla.chunk_gla(q=q, k=k, v=v, g=g, scale=scale)[0]


__all__ = ["gla", "BACKENDS"]
