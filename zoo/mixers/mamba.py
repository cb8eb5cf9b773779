"""Mamba-1 block (Gu and Dao 2023): expand, causal conv, input-dependent (dt, B, C), selective scan, gate.

    x, z = in_proj(u);  x = silu(conv(x));  dt, B, C = x_proj(x);  dt = softplus(dt_proj(dt) + dt_bias)
    y = selective_scan(x, dt, A, B, C) + D * x;  out = out_proj(y * silu(z))

The scan is ``zoo.kernels.selective_scan``: on GPU mamba-ssm's fused ``selective_scan_fn`` where its extension
imports, else our Triton scan; on CPU the PyTorch recurrence. The dt bias and softplus, the D skip and the z gate
are its options, fused into the GPU scans (float32 math, as the eager form's ``.float()`` casts; our Triton scan
stores y in the block input's dtype, bf16 under autocast, as mamba-ssm's returns it). The silu after the conv is
fused into the conv (``ShortConv(activation="silu")``).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from zoo.kernels.linear import Linear
from zoo.kernels.linear.split import linear_parts, split_linear
from zoo.kernels.rows import rows_at
from zoo.kernels.selective_scan import selective_scan
from zoo.errors import ConfigError
from zoo.mixers.short_conv import ShortConv
from zoo.mixers.registry import register_mixer


@register_mixer("mamba")
class Mamba(nn.Module):
    """The Mamba-1 block: (B, L, D) -> (B, L, D), mamba-ssm's ``Mamba`` (the reference) in zoo's names
    (its ``dt_proj.bias`` is ``dt_bias`` here); defaults and initialisation are mamba-ssm's.

    Args:
        d_model: D.
        d_state: N, state size per channel (16; a power of two for the Triton scan).
        expand: inner width E = expand * D (2).
        d_conv: causal conv length (4).
        dt_rank: rank of the dt projection ("auto": ceil(D / 16)).
    """

    input_feeds_one_matmul = True  # u reaches in_proj alone: the norm before it may write autocast's dtype
    outputs_at_positions = True  # forward(u, positions): the gate and out_proj on those rows alone

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, d_state: int = 16,
                 expand: int = 2, d_conv: int = 4, dt_rank: int | str = "auto", dt_min: float = 1e-3,
                 dt_max: float = 0.1):
        super().__init__()
        if d_state < 1 or d_state & (d_state - 1):
            raise ConfigError("model.mixer_kwargs.d_state", d_state, "a power of two")
        if expand < 1:
            raise ConfigError("model.mixer_kwargs.expand", expand, "an integer >= 1")
        if d_conv < 1:
            raise ConfigError("model.mixer_kwargs.d_conv", d_conv, "an integer >= 1")
        if dt_rank == "auto":
            dt_rank = math.ceil(d_model / 16)
        if not isinstance(dt_rank, int) or dt_rank < 1:
            raise ConfigError("model.mixer_kwargs.dt_rank", dt_rank, "'auto' or an integer >= 1")
        E = expand * d_model
        self.d_inner, self.d_state, self.dt_rank = E, d_state, dt_rank
        self.in_proj = nn.Linear(d_model, 2 * E, bias=False)
        self.conv = ShortConv(E, d_conv, activation="silu")
        self.x_proj = Linear(E, dt_rank + 2 * d_state, bias=False)
        self.dt_proj = Linear(dt_rank, E, bias=False)
        dt = torch.exp(torch.rand(E) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(E, 1))
        self.D = nn.Parameter(torch.ones(E))
        self.out_proj = Linear(E, d_model, bias=False)

    def forward(self, u: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """u (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the gate
        z (its half of in_proj), the gating and out_proj on those rows; the scan still walks every row."""
        E = self.d_inner
        if positions is None:
            x, z = split_linear(u, self.in_proj.weight, [E, E])  # no concatenated gradient
        else:
            w_x, w_z = self.in_proj.weight.split([E, E])
            (x,), (z,) = linear_parts(u, [w_x]), linear_parts(rows_at(u, positions), [w_z])
        x = self.conv(x)
        dt, B, C = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        y = selective_scan(x, self.dt_proj(dt), -torch.exp(self.A_log.float()), B, C, D=self.D,
                           z=z if positions is None else None, delta_bias=self.dt_bias, delta_softplus=True,
                           out_dtype=u.dtype)
        if positions is not None:  # y * silu(z) as the scan gates it, in float32 at least
            wide = torch.promote_types(y.dtype, torch.float32)
            y = (rows_at(y, positions).to(wide) * F.silu(z.to(wide))).to(y.dtype)
        return self.out_proj(y)

    def state_size(self, seq_len: int) -> int:
        """Values per sequence: the (E, N) SSM state plus the conv's last ``d_conv - 1`` inputs."""
        return self.d_inner * self.d_state + self.conv.state_numel()
