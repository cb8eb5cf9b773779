"""BASED's normalized causal Taylor linear attention (see ``naive.py`` for the formula).

``based_attention(q, k, v, backend="auto")``: ``"fla"`` (flash-linear-attention's ``parallel_based``),
``"naive"`` (``naive.py``, the exact quadratic form) or ``"auto"`` (fla for CUDA tensors where it imports,
else the quadratic form). ``zoo.kernels.backend.last_backend("based")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, recorded_path
from zoo.kernels.based.naive import based_naive

BACKENDS = ("auto", "fla", NAIVE)


def based_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """q, k: (B, L, H, F); v: (B, L, H, Dv) -> (B, L, H, Dv), logits scaled by ``F ** -0.5``."""
    check_backend(backend, BACKENDS)
    fla = recorded_path("based", backend, "fla", "fla.ops.based", q,
                        "based on GPU (falls back to the quadratic PyTorch reference)")
    if fla is None:
        return based_naive(q, k, v)
    return fla.parallel_based(q, k, v, scale=q.shape[-1] ** -0.5, use_norm=True)


__all__ = ["based_attention", "BACKENDS"]
