"""Plain PyTorch WKV, one time step at a time, stabilized with a running max exponent.

For channel c, with decay rate ``w > 0`` and bonus ``u``::

    y_t = (sum_{i<t} e^{-(t-1-i) w + k_i} v_i + e^{u + k_t} v_t) / (sum_{i<t} e^{-(t-1-i) w + k_i} + e^{u + k_t})
"""
from __future__ import annotations

import torch


def wkv4_naive(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """w, u: (C,); k, v: (B, L, C) -> y: (B, L, C), computed in float32 (float64 stays float64)."""
    dtype = torch.promote_types(k.dtype, torch.float32)
    w, u, k, v = (t.to(dtype) for t in (w, u, k, v))
    num = torch.zeros_like(k[:, 0])  # sum e^{k_i - decay - p} v_i over the past, scaled by e^{-p}
    den = torch.zeros_like(k[:, 0])
    p = torch.full_like(k[:, 0], -1e38)  # running max exponent
    out = []
    for t in range(k.shape[1]):
        kt, vt = k[:, t], v[:, t]
        q = torch.maximum(p, u + kt)
        a, b = torch.exp(p - q), torch.exp(u + kt - q)
        out.append((a * num + b * vt) / (a * den + b))
        q = torch.maximum(p - w, kt)
        a, b = torch.exp(p - w - q), torch.exp(kt - q)
        num, den, p = a * num + b * vt, a * den + b, q
    return torch.stack(out, dim=1)
