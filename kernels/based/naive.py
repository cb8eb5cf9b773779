"""Plain PyTorch BASED linear attention (Arora et al. 2024), in its exact quadratic form.

The 2nd-order Taylor feature map makes ``phi(q).phi(k) = 1 + s + s^2/2`` with ``s = q.k / sqrt(F)``; each
output is the causal average of past values under those weights (Zoology's ``based.Based``,
``train_view="quadratic"``).
"""
from __future__ import annotations

import torch

EPS = 1e-12  # Zoology's; the normalizer is >= 1/2 per visible key, so it only guards an empty sum


def based_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Normalized causal Taylor linear attention in its quadratic form.

    q, k: (B, L, H, F); v: (B, L, H, Dv) -> (B, L, H, Dv).
    """
    s = torch.einsum("blhf,bmhf->bhlm", q.float(), k.float()) * q.shape[-1] ** -0.5
    a = (1 + s + 0.5 * s * s).tril()
    o = torch.einsum("bhlm,bmhd->blhd", a, v.float()) / (a.sum(-1).transpose(1, 2)[..., None] + EPS)
    return o.to(v.dtype)
