"""Plain PyTorch BASED linear attention (Arora et al. 2024), in its exact quadratic form.

The 2nd-order Taylor feature map makes ``phi(q).phi(k) = 1 + s + s^2/2`` with ``s = q.k / sqrt(F)``; each
output is the causal average of past values under those weights (Zoology's ``based.Based``,
``train_view="quadratic"``). The math is float32 (float64 stays), autocast or not.
"""
from __future__ import annotations

import torch

from zoo.kernels.attention import causal_mask, visible_keys

EPS = 1e-12  # Zoology's; the normalizer is >= 1/2 per visible key, so it only guards an empty sum


def taylor_average(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """The average of the values each query sees under the Taylor weights, in float32 (float64 stays).

    q: (B, M, H, F) queries; k: (B, L, H, F); v: (B, L, H, Dv); visible: bool, broadcast to (B, H, M, L), which keys
    each query sees -> (B, M, H, Dv)."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    with torch.autocast(q.device.type, enabled=False):
        s = torch.einsum("blhf,bmhf->bhlm", q.to(dtype), k.to(dtype)) * q.shape[-1] ** -0.5
        a = torch.where(visible, 1 + s + 0.5 * s * s, 0.0)
        return torch.einsum("bhlm,bmhd->blhd", a, v.to(dtype)) / (a.sum(-1).transpose(1, 2)[..., None] + EPS)


def based_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Normalized causal Taylor linear attention in its quadratic form.

    q, k: (B, L, H, F); v: (B, L, H, Dv) -> (B, L, H, Dv).
    """
    L = q.shape[1]
    return taylor_average(q, k, v, causal_mask(L, L, q.device)).to(v.dtype)


def based_naive_at(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The outputs at ``positions`` alone: q (B, K, H, F) the queries at those rows, k (B, L, H, F), v (B, L, H, Dv),
    positions (B, K) int64 -> (B, K, H, Dv), each query seeing the keys at or before its row."""
    return taylor_average(q, k, v, visible_keys(positions, k.shape[1])).to(v.dtype)
