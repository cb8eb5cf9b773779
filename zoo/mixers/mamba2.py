"""Mamba-2 (Dao and Gu 2024): the SSD block with scalar-per-head decay, one group of B and C.

Per head ``h`` (head dim P) and state size N::

    S_t = exp(dt_t A_h) S_{t-1} + dt_t B_t x_t^T      S: (N, P)
    y_t = S_t^T C_t + D_h x_t

GPU: fla's ``chunk_simple_gla`` (SSD is gated linear attention with q=C, k=B, v=dt*x, log gate dt*A);
CPU: ``ssd_ref``, the exact quadratic (masked, decayed attention) form.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from zoo.errors import ConfigError
from zoo.mixers.fastpath import fast_module
from zoo.mixers.short_conv import ShortConv
from zoo.registry import register_mixer


def ssd_ref(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """``y_t = sum_{s<=t} (C_t . B_s) exp(sum_{s<r<=t} dt_r A) dt_s x_s`` per head, in float32.

    x: (Bt, L, H, P); dt: (Bt, L, H) positive; A: (H,) negative; B, C: (Bt, L, N) -> (Bt, L, H, P).
    """
    L = x.shape[1]
    g = torch.cumsum(dt.float() * A.float(), dim=1).transpose(1, 2)  # (Bt, H, L) log decay so far
    causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp((g[..., :, None] - g[..., None, :]).masked_fill(~causal, -torch.inf))  # (Bt, H, L, L)
    scores = torch.einsum("bln,bmn->blm", C.float(), B.float())[:, None] * decay
    y = torch.einsum("bhlm,bmhp->blhp", scores, x.float() * dt.float()[..., None])
    return y.to(x.dtype)


def ssd(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """SSD scan with ``ssd_ref``'s signature; fla's chunked kernel on GPU when it imports."""
    fla = fast_module("fla.ops.simple_gla", "mamba2 on GPU (falls back to the quadratic PyTorch reference)", x)
    if fla is None:
        return ssd_ref(x, dt, A, B, C)
    H = x.shape[2]
    q = C[:, :, None].expand(-1, -1, H, -1).to(x.dtype).contiguous()
    k = B[:, :, None].expand(-1, -1, H, -1).to(x.dtype).contiguous()
    v = x * dt[..., None].to(x.dtype)
    o, _ = fla.chunk_simple_gla(q, k, v, g=(dt.float() * A.float()), scale=1.0)
    return o.to(x.dtype)


class GatedRMSNorm(nn.Module):
    """rmsnorm(y * silu(z)) * weight over the last dim: (..., E) -> (..., E)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        y = (y * F.silu(z)).float()
        return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(z.dtype)


@register_mixer("mamba2")
class Mamba2(nn.Module):
    """The Mamba-2 block: (B, L, D) -> (B, L, D).

    Args:
        d_model: D.
        d_state: N (64).
        expand: inner width E = expand * D (2).
        headdim: P, so E / P heads (64); must divide E.
        d_conv: causal conv length on (x, B, C) (4).
    """

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, d_state: int = 64,
                 expand: int = 2, headdim: int = 64, d_conv: int = 4, dt_min: float = 1e-3, dt_max: float = 0.1):
        super().__init__()
        d_inner = expand * d_model
        if d_state < 1:
            raise ConfigError("model.mixer_kwargs.d_state", d_state, "an integer >= 1")
        if headdim < 1 or d_inner % headdim:
            raise ConfigError("model.mixer_kwargs.headdim", headdim, f"a divisor of expand*d_model={d_inner}")
        if d_conv < 1:
            raise ConfigError("model.mixer_kwargs.d_conv", d_conv, "an integer >= 1")
        self.d_inner, self.d_state, self.headdim = d_inner, d_state, headdim
        self.nheads = d_inner // headdim
        self.in_proj = nn.Linear(d_model, 2 * d_inner + 2 * d_state + self.nheads, bias=False)
        self.conv = ShortConv(d_inner + 2 * d_state, d_conv)
        dt = torch.exp(torch.rand(self.nheads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.A_log = nn.Parameter(torch.log(torch.empty(self.nheads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.norm = GatedRMSNorm(d_inner)
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        Bt, L, _ = u.shape
        z, xbc, dt = self.in_proj(u).split([self.d_inner, self.d_inner + 2 * self.d_state, self.nheads], dim=-1)
        x, B, C = F.silu(self.conv(xbc)).split([self.d_inner, self.d_state, self.d_state], dim=-1)
        x = x.reshape(Bt, L, self.nheads, self.headdim)
        dt = F.softplus(dt.float() + self.dt_bias)
        y = ssd(x, dt, -torch.exp(self.A_log.float()), B, C) + x * self.D[:, None].to(x.dtype)
        return self.out_proj(self.norm(y.reshape(Bt, L, self.d_inner), z))

    def state_size(self, seq_len: int) -> int:
        """Bytes per sequence: the (N, P) state of every head plus the conv window."""
        return 4 * (self.nheads * self.d_state * self.headdim + self.conv.state_numel())
