"""Gated linear attention: a linear-attention state decayed by a per-key-channel forget gate.

``gla(q, k, v, g, scale=None, backend="auto")``: ``"fla"`` (flash-linear-attention's ``chunk_gla``),
``"naive"`` (``naive.gla_recurrent``, the PyTorch recurrence) or ``"auto"`` (fla for CUDA tensors where it
imports and works on this GPU, else the recurrence; see ``zoo.kernels.backend.FLA_CHUNK_MODULES_BROKEN_ON_HOPPER``). Used
by ``gla`` and ``hgrn2`` (keys tied to the forget gate); ``zoo.kernels.retention`` is the same recurrence with
a fixed decay per head. ``zoo.kernels.backend.last_backend("gla")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, fast_path, record
from zoo.kernels.gla.naive import gla_recurrent

BACKENDS = ("auto", "fla", NAIVE)


def gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, scale: float | None = None,
        backend: str = "auto") -> torch.Tensor:
    """q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H, K] log forget gates (<= 0); scale: K ** -0.5 when
    None -> o: [B, T, H, V]."""
    check_backend(backend, BACKENDS)
    fla = fast_path(backend, "fla", "fla.ops.gla", q, "gla on GPU (falls back to the PyTorch recurrence)")
    record("gla", NAIVE if fla is None else "fla")
    if fla is None:
        return gla_recurrent(q, k, v, g, scale)
    o, _ = fla.chunk_gla(q=q, k=k, v=v, g=g, scale=scale)
    return o


__all__ = ["gla", "BACKENDS"]
