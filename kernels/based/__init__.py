"""BASED's normalized causal Taylor linear attention (see ``naive.py`` for the formula).

``based_attention(q, k, v, backend="auto")``: ``"fla"`` (flash-linear-attention's ``parallel_based``),
``"naive"`` (``naive.py``, the exact quadratic form) or ``"auto"`` (fla for CUDA tensors where it imports,
else the quadratic form). ``zoo.kernels.backend.last_backend("based")`` says which ran.

``based_attention_at(q, k, v, positions)``: the outputs at some rows alone (a training step's labelled rows), the
quadratic form of their K queries against every key on any device: (B, K, L) weights, a few small kernels, where
the full form's kernels walk all L rows.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, recorded_path
from zoo.kernels.based.naive import based_naive, based_naive_at

BACKENDS = ("auto", "fla", NAIVE)


def based_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """q, k: (B, L, H, F); v: (B, L, H, Dv) -> (B, L, H, Dv), logits scaled by ``F ** -0.5``."""
    check_backend(backend, BACKENDS)
    fla = recorded_path("based", backend, "fla", "fla.ops.based", q,
                        "based on GPU (falls back to the quadratic PyTorch reference)")
    if fla is None:
        return based_naive(q, k, v)
    return fla.parallel_based(q, k, v, scale=q.shape[-1] ** -0.5, use_norm=True)


def based_attention_at(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """q: (B, K, H, F) the queries at ``positions`` (B, K); k: (B, L, H, F); v: (B, L, H, Dv) -> (B, K, H, Dv): rows
    ``positions`` of ``based_attention``'s output, in float32 math (float64 stays). One implementation on every
    device, so nothing is recorded."""
    return based_naive_at(q, k, v, positions)


__all__ = ["based_attention", "based_attention_at", "BACKENDS"]
