"""Plain PyTorch SSD (Mamba-2's state space dual), in its exact quadratic form.

Per head ``h`` (head dim P) with state S: (N, P), scalar decay A_h < 0, one group of B, C and the skip D_h::

    S_t = exp(dt_t A_h) S_{t-1} + dt_t B_t x_t^T,    y_t = S_t^T C_t + D_h x_t

(Dao and Gu 2024; the gate is the Mamba-2 block's, around this op.)
"""
from __future__ import annotations

import torch


def ssd_naive(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
              D: torch.Tensor | None = None) -> torch.Tensor:
    """``y_t = sum_{s<=t} (C_t . B_s) exp(sum_{s<r<=t} dt_r A) dt_s x_s + D x_t`` per head, in float32.

    x: [Bt, L, H, P]; dt: [Bt, L, H] positive; A: [H] negative; B, C: [Bt, L, N]; D: [H] or None (no skip)
    -> y: [Bt, L, H, P] in x's dtype.
    """
    L = x.shape[1]
    g = torch.cumsum(dt.float() * A.float(), dim=1).transpose(1, 2)  # [Bt, H, L] log decay so far
    causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp((g[..., :, None] - g[..., None, :]).masked_fill(~causal, -torch.inf))  # [Bt, H, L, L]
    scores = torch.einsum("bln,bmn->blm", C.float(), B.float())[:, None] * decay
    y = torch.einsum("bhlm,bmhp->blhp", scores, x.float() * dt.float()[..., None])
    if D is not None:
        y = y + x.float() * D.float()[:, None]
    return y.to(x.dtype)
