"""Hyena (Poli et al. 2023), order 2, as Zoology defines it (``zoology/mixers/hyena.py``).

Per layer: ``in_proj`` D -> 3D, a depthwise causal conv of length ``short_filter_order`` on the three
streams ``(x1, x2, v)``, then ``y = x2 * (h * (x1 * v))`` where ``h`` is a length-L filter per channel
produced by a small MLP (shared-frequency ``sin`` activations) from positional features and modulated
by an exponential decay; ``*`` with ``h`` is a causal convolution done by FFT with 2L zero padding,
plus a per-channel skip ``bias`` (``zoo.kernels.long_conv``). Finally ``out_proj``. The same FFT path runs
on CPU and GPU; on GPU the gates around it are fused into Triton kernels (``gated_long_conv``), and the filter's MLP
runs as one autograd Function in float32 (``zoo.kernels.implicit_filter``).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from zoo.kernels.implicit_filter import implicit_filter
from zoo.kernels.linear import Linear
from zoo.kernels.long_conv import gated_long_conv
from zoo.kernels.rows import rows_at
from zoo.errors import ConfigError
from zoo.mixers.short_conv import ShortConv
from zoo.mixers.registry import register_mixer


class Sin(nn.Module):
    """The learned per-feature frequencies of the implicit filter's activation, sin(freq * x), which
    ``zoo.kernels.implicit_filter`` applies. A module in the filter's ``nn.Sequential`` only so that parameter names
    are Zoology's (``mlp.1.freq``): checkpoints and the parity tests map one onto the other."""

    def __init__(self, dim: int, freq: float):
        super().__init__()
        self.freq = nn.Parameter(torch.full((dim,), freq))


class ImplicitFilter(nn.Module):
    """Positions -> (L, D) long filter: features ``z`` -> MLP with Sin -> exponential decay window.

    ``z[t] = [t / (L_max - 1), cos(2 pi f t / L_max), -sin(2 pi f t / L_max)]`` over ``(emb_dim - 1) / 2``
    bands ``f`` (the real and imaginary parts of ``exp(-i 2 pi f t / L_max)``). ``z`` is a trainable
    parameter as in Zoology, whose optimizer ignores the small learning rate Hyena's code asks for it.
    One ``Sin`` module (one set of frequencies) follows every hidden linear layer, as in Zoology.

    Args:
        d_model: D, one filter per channel.
        max_seq_len: longest filter that can be produced.
        emb_dim: positional features (odd: t plus (emb_dim-1)/2 cos/sin pairs).
        filter_order: MLP width.
        num_inner_mlps: hidden ``filter_order -> filter_order`` layers.
        fast_decay_pct, slow_decay_pct: channel decays span from reaching 1e-2 of the initial value
            at this fraction of the sequence (fast) to this fraction (slow).
    """

    def __init__(self, d_model: int, max_seq_len: int, emb_dim: int = 3, filter_order: int = 64,
                 num_inner_mlps: int = 2, sin_freq: float = 1.0, fast_decay_pct: float = 0.3,
                 slow_decay_pct: float = 1.5):
        super().__init__()
        if emb_dim < 3 or emb_dim % 2 == 0:
            raise ConfigError("model.mixer_kwargs.emb_dim", emb_dim, "an odd integer >= 3")
        t = torch.linspace(0, 1, max_seq_len)[:, None]  # (L, 1)
        bands = (emb_dim - 1) // 2
        f = torch.linspace(1e-4, bands - 1, bands)[None]
        angle = 2 * math.pi * f * torch.arange(max_seq_len)[:, None] / max_seq_len
        self.z = nn.Parameter(torch.cat([t, torch.cos(angle), -torch.sin(angle)], dim=-1))
        self.register_buffer("t", t, persistent=False)
        sin = Sin(filter_order, sin_freq)
        layers = [nn.Linear(emb_dim, filter_order), sin]
        for _ in range(num_inner_mlps):
            layers += [nn.Linear(filter_order, filter_order), sin]
        # a Sequential for Zoology's parameter names; forward reads its layers' parameters
        self.mlp = nn.Sequential(*layers, nn.Linear(filter_order, d_model, bias=False))
        max_decay = math.log(1e-2) / fast_decay_pct
        min_decay = math.log(1e-2) / slow_decay_pct
        self.register_buffer("deltas", torch.linspace(min_decay, max_decay, d_model).abs(), persistent=False)

    def forward(self, L: int) -> torch.Tensor:
        """-> (L, D) filter taps (``zoo.kernels.implicit_filter``: the MLP and the window in one Function on GPU)."""
        linears = self.mlp[0::2]  # Linear, Sin, Linear, Sin, ..., Linear
        return implicit_filter(self.z[:L], [m.weight for m in linears[:-1]], [m.bias for m in linears[:-1]],
                               self.mlp[1].freq, linears[-1].weight, self.t[:L], self.deltas)


@register_mixer("hyena")
class Hyena(nn.Module):
    """Order-2 Hyena operator: (B, L, D) -> (B, L, D). Defaults are Zoology's (figure 2).

    Args:
        d_model: D.
        max_seq_len: longest sequence (sizes the implicit filter).
        short_filter_order: length of the depthwise causal conv on the three streams (3).
        filter_order: width of the implicit filter MLP (64).
        emb_dim: positional features fed to that MLP (3).
        num_inner_mlps: hidden layers of that MLP (2).
    """

    input_feeds_one_matmul = True  # x reaches in_proj alone: the norm before it may write autocast's dtype
    outputs_at_positions = True  # forward(x, positions): out_proj on those rows of the gated conv alone

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, short_filter_order: int = 3,
                 filter_order: int = 64, emb_dim: int = 3, num_inner_mlps: int = 2):
        super().__init__()
        if short_filter_order < 1:
            raise ConfigError("model.mixer_kwargs.short_filter_order", short_filter_order, "an integer >= 1")
        if filter_order < 1:
            raise ConfigError("model.mixer_kwargs.filter_order", filter_order, "an integer >= 1")
        if num_inner_mlps < 0:
            raise ConfigError("model.mixer_kwargs.num_inner_mlps", num_inner_mlps, "an integer >= 0")
        self.d_model = d_model
        self.in_proj = Linear(d_model, 3 * d_model)
        self.short_conv = ShortConv(3 * d_model, short_filter_order)
        self.filter = ImplicitFilter(d_model, max_seq_len, emb_dim=emb_dim, filter_order=filter_order,
                                     num_inner_mlps=num_inner_mlps)
        self.filter_bias = nn.Parameter(torch.randn(d_model))
        self.out_proj = Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D)."""
        y = gated_long_conv(self.short_conv(self.in_proj(x)), self.filter(x.shape[1]), self.filter_bias)
        return self.out_proj(y if positions is None else rows_at(y, positions))

    def state_size(self, seq_len: int) -> int:
        """Values per sequence: the long conv needs its whole input history (``seq_len * D``), plus the
        short conv's last ``short_filter_order - 1`` inputs of the three streams."""
        return seq_len * self.d_model + self.short_conv.state_numel()
