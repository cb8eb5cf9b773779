"""Plain PyTorch selective scan, one time step at a time (the math of mamba-ssm's ``selective_scan_ref``
without its D skip, z gate and dt bias, which the Mamba block applies around it)::

    h_t = exp(dt_t A) * h_{t-1} + dt_t B_t u_t      h: (D, N) per sequence
    y_t = h_t C_t
"""
from __future__ import annotations

import torch


def selective_scan_naive(u: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                         C: torch.Tensor) -> torch.Tensor:
    """u, dt: (Bt, L, D); A: (D, N); B, C: (Bt, L, N) -> y: (Bt, L, D) in float32 (float64 stays)."""
    dtype = torch.promote_types(u.dtype, torch.float32)
    u, dt, A, B, C = (t.to(dtype) for t in (u, dt, A, B, C))
    h = u.new_zeros(u.shape[0], u.shape[2], A.shape[1])
    out = []
    for t in range(u.shape[1]):
        h = torch.exp(dt[:, t, :, None] * A) * h + (dt[:, t] * u[:, t])[..., None] * B[:, t, None]
        out.append(torch.einsum("bdn,bn->bd", h, C[:, t]))
    return torch.stack(out, dim=1)
