"""Mamba-2 (Dao and Gu 2024): the SSD block with scalar-per-head decay, one group of B and C.

Per head ``h`` (head dim P) and state size N::

    S_t = exp(dt_t A_h) S_{t-1} + dt_t B_t x_t^T      S: (N, P)
    y_t = S_t^T C_t + D_h x_t

The scan, D's skip included, is ``zoo.kernels.ssd.ssd``: on GPU the chunked SSD algorithm in Triton kernels (the
state carried in registers; matmuls on tensor cores under bf16 autocast), on CPU the exact quadratic form. The gated
norm is ``zoo.kernels.layer_norm.rms_norm`` with the gate first (one Triton kernel each way on GPU).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from zoo.kernels.layer_norm import rms_norm
from zoo.kernels.linear import Linear
from zoo.kernels.linear.split import split_linear
from zoo.kernels.rows import rows_at
from zoo.kernels.ssd import ssd
from zoo.errors import ConfigError
from zoo.mixers.short_conv import ShortConv
from zoo.mixers.registry import register_mixer


class GatedRMSNorm(nn.Module):
    """rmsnorm(y * silu(z)) * weight over the last dim, float32 math: y, z [..., E] -> [..., E] in z's dtype.
    One Triton kernel each way on GPU, the gate's product included (mamba-ssm's ``RMSNormGated`` with
    ``norm_before_gate=False``)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return rms_norm(y, self.weight, self.eps, gate=z, out_dtype=z.dtype, gate_first=True)


@register_mixer("mamba2")
class Mamba2(nn.Module):
    """The Mamba-2 block: (B, L, D) -> (B, L, D), fla's / mamba-ssm's ``Mamba2`` (the reference) with one
    group of B and C, scalar D per head and the gated RMSNorm after the gate; defaults and initialisation
    are theirs.

    Args:
        d_model: D.
        d_state: N (128).
        expand: inner width E = expand * D (2).
        headdim: P, so E / P heads (64); must divide E.
        d_conv: causal conv length on (x, B, C) (4).
    """

    input_feeds_one_matmul = True  # u reaches in_proj alone: the norm before it may write autocast's dtype
    outputs_at_positions = True  # forward(u, positions): the gated norm and out_proj on those rows alone

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, d_state: int = 128,
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
        self.conv = ShortConv(d_inner + 2 * d_state, d_conv, activation="silu")
        dt = torch.exp(torch.rand(self.nheads) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.A_log = nn.Parameter(torch.log(torch.empty(self.nheads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.norm = GatedRMSNorm(d_inner)
        self.out_proj = Linear(d_inner, d_model, bias=False)

    def forward(self, u: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """u (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the
        gated norm and out_proj on those rows."""
        Bt, L, _ = u.shape
        # each part its own contiguous tensor (the conv's rows 16-byte aligned; no concatenated gradient)
        z, xbc, dt = split_linear(u, self.in_proj.weight, [self.d_inner, self.d_inner + 2 * self.d_state, self.nheads])
        x, B, C = self.conv(xbc).split([self.d_inner, self.d_state, self.d_state], dim=-1)
        x = x.reshape(Bt, L, self.nheads, self.headdim)
        dt = F.softplus(dt + self.dt_bias)  # float32: autocast's bf16 dt and the float32 bias promote in one kernel
        y = ssd(x, dt, -torch.exp(self.A_log.float()), B, C, self.D)
        y = y.reshape(Bt, L, self.d_inner)
        if positions is not None:
            y, z = rows_at(y, positions), rows_at(z, positions)
        return self.out_proj(self.norm(y, z))

    def state_size(self, seq_len: int) -> int:
        """Values per sequence: the (N, P) state of every head plus the conv's last ``d_conv - 1`` inputs
        of (x, B, C)."""
        return self.nheads * self.d_state * self.headdim + self.conv.state_numel()
