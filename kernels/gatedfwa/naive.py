"""Plain PyTorch references for GatedFWA: the readable definition the Triton kernels are tested against.

Shapes: batch ``B``, time ``T``, heads ``H``, head dim ``D``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def gate_cumsum_ref(h: torch.Tensor, beta: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Log-decay prefix of GatedFWA (paper sec. 3.3, Algorithm 1).

    Args:
        h: (B, T, H) gate pre-activations.
        beta: (B, T, H) positive gate temperatures.
    Returns:
        u: (B, T, H) float32 (float64 for float64 inputs),
        ``u_t = -sum_{s<=t} softplus(beta_s * h_s) / (beta_s + eps)``; nonincreasing in t.
    """
    dtype = torch.promote_types(torch.promote_types(h.dtype, beta.dtype), torch.float32)
    h, beta = h.to(dtype), beta.to(dtype)
    return -torch.cumsum(F.softplus(beta * h) / (beta + eps), dim=1)


def gated_window_attention_ref(q, k, v, u, window: int, scale: float | None = None,
                               chunk: int = 128) -> torch.Tensor:
    """Sliding-window softmax attention with the GatedFWA decay bias, computed chunk by chunk.

    Query ``i`` attends to keys ``i - window < j <= i`` with logits ``q_i . k_j * scale + u_i - u_j``.

    Args:
        q, k, v: (B, T, H, D).
        u: (B, T, H) log-decay prefix (see :func:`gate_cumsum_ref`), or None for plain sliding-window
            attention.
        window: number of keys each query sees (itself included), >= 1.
        scale: logit scale, ``D ** -0.5`` when None.
        chunk: queries per step; memory is O(B * H * chunk * (chunk + window)) rather than O(T^2).
    Returns:
        o: (B, T, H, D) in the dtype of q; computed in float32 (float64 for float64 inputs).
    """
    B, T, H, D = q.shape
    scale = D ** -0.5 if scale is None else scale
    dtype = torch.promote_types(q.dtype, torch.float32)
    qf, kf, vf = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, D)
    uf = None if u is None else u.to(dtype).transpose(1, 2)  # (B, H, T)
    outs = []
    for start in range(0, T, chunk):
        end = min(start + chunk, T)
        lo = max(0, start - window + 1)
        i = torch.arange(start, end, device=q.device)[:, None]
        j = torch.arange(lo, end, device=q.device)[None, :]
        logits = torch.einsum("bhid,bhjd->bhij", qf[:, :, start:end], kf[:, :, lo:end]) * scale
        if uf is not None:
            logits = logits + uf[:, :, start:end, None] - uf[:, :, None, lo:end]
        inside = (j <= i) & (j > i - window)
        logits = logits.masked_fill(~inside, float("-inf"))
        outs.append(torch.softmax(logits, dim=-1) @ vf[:, :, lo:end])
    return torch.cat(outs, dim=2).transpose(1, 2).to(q.dtype)
