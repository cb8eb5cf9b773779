"""Plain PyTorch RWKV-7 state recurrence ("dynamic state evolution", Peng et al. 2025), one step at a time.

Per head, with state S: (K, V) and per-step log decay w_t < 0::

    S_t = diag(exp(w_t)) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T,    o_t = S_t^T r_t

(the RWKV-7 layer passes a_t = -kk_t and b_t = kk_t * iclr_t: normalized key and in-context learning rate).
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import not_compiled


def rwkv7_naive(r, w, k, v, a, b) -> torch.Tensor:
    """The state recurrence above, step by step in float32.

    r, w, k, a, b: (B, L, H, K); v: (B, L, H, V) -> o: (B, L, H, V).
    """
    return rwkv7_recurrence(*(t.float() for t in (r, w, k, v, a, b)))


@not_compiled  # a loop over time: torch.compile would unroll it, once per length
def rwkv7_recurrence(r, w, k, v, a, b) -> torch.Tensor:
    """``rwkv7_naive`` in the inputs' own dtype (the tests' float64 reference)."""
    Bt, L, H, K = r.shape
    S = r.new_zeros(Bt, H, K, v.shape[-1])
    out = []
    for t in range(L):
        sa = torch.einsum("bhk,bhkv->bhv", a[:, t], S)
        S = S * torch.exp(w[:, t])[..., None] + b[:, t, :, :, None] * sa[:, :, None] + k[:, t, :, :, None] * v[:, t, :, None]
        out.append(torch.einsum("bhk,bhkv->bhv", r[:, t], S))
    return torch.stack(out, dim=1)
