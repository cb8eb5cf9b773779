"""Plain PyTorch gated linear attention, one time step at a time.

Per head, with state S: (K, V), log forget gates g_t <= 0 (one per key channel) and scale s::

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,    o_t = s * S_t^T q_t

GLA (Yang et al. 2024) learns g_t from the input; RetNet (Sun et al. 2023) uses a constant
g = log(gamma_h) per head; HGRN2 (Qin et al. 2024) ties the key to the gate, k_t = 1 - exp(g_t).
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import not_compiled


@not_compiled  # a loop over time: torch.compile would unroll it, once per length
def gla_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                  scale: float | None = None) -> torch.Tensor:
    """The recurrence above in float32 (float64 stays float64).

    q, k: [B, T, H, K]; v: [B, T, H, V]; g: log forget gates, [B, T, H, K] or anything that broadcasts
    to it (RetNet passes [1, 1, H, 1]); scale: s, K ** -0.5 when None (fla's default) -> o: [B, T, H, V]
    in v's dtype.
    """
    dtype = torch.promote_types(v.dtype, torch.float32)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    decay = torch.exp(g.to(dtype)).expand_as(k)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        S = decay[:, t, ..., None] * S + k[:, t, ..., None] * v[:, t, :, None]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S))
    return torch.stack(out, dim=1).to(v.dtype)
