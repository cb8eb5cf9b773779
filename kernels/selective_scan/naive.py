"""Plain PyTorch selective scan, one time step at a time: the math of mamba-ssm's ``selective_scan_ref``
(time-first here) with its optional dt bias and softplus, D skip and z gate::

    dt = softplus(dt + delta_bias)                  (each optional)
    h_t = exp(dt_t A) * h_{t-1} + dt_t B_t u_t      h: (E, N) per sequence
    y_t = (h_t C_t + D u_t) * silu(z_t)             (D and z optional)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def selective_scan_naive(u: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                         D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                         delta_bias: torch.Tensor | None = None, delta_softplus: bool = False) -> torch.Tensor:
    """u, dt, z: (Bt, L, E); A: (E, N); B, C: (Bt, L, N); D, delta_bias: (E,) -> y: (Bt, L, E) in float32
    (float64 stays)."""
    dtype = torch.promote_types(u.dtype, torch.float32)
    u, dt, A, B, C = (t.to(dtype) for t in (u, dt, A, B, C))
    if delta_bias is not None:
        dt = dt + delta_bias.to(dtype)
    if delta_softplus:
        dt = F.softplus(dt)
    h = u.new_zeros(u.shape[0], u.shape[2], A.shape[1])
    out = []
    for t in range(u.shape[1]):
        h = torch.exp(dt[:, t, :, None] * A) * h + (dt[:, t] * u[:, t])[..., None] * B[:, t, None]
        out.append(torch.einsum("bdn,bn->bd", h, C[:, t]))
    y = torch.stack(out, dim=1)
    if D is not None:
        y = y + u * D.to(dtype)
    if z is not None:
        y = y * F.silu(z.to(dtype))
    return y
