"""BASED (Arora et al. 2024) as Zoology runs it on MQAR (figure 2): layers alternate two mixers.

* even ``layer_idx``: BaseConv, ``u + proj(u) * conv(u)`` with a causal depthwise conv of length
  ``conv_kernel`` (Zoology's ``base_conv.BaseConv``: no output projection, its own residual);
* odd ``layer_idx``: causal linear attention with the 2nd-order Taylor feature map
  ``phi(q).phi(k) = 1 + s + s^2/2``, ``s = q.k / sqrt(feature_dim)``, normalized by the running sum
  of those weights (Zoology's ``based.Based``, ``train_view="quadratic"``), ``zoo.kernels.based``: fla's
  ``parallel_based`` on GPU, the exact quadratic form on CPU. In the model's last block (``outputs_at_positions``)
  only the labelled rows' queries attend, through the quadratic form on every device (``based_attention_at``): a
  (B, K, L) weight matrix in float32, where the full form walks all L rows.
"""
from __future__ import annotations

import torch
from torch import nn

from zoo.kernels.based import based_attention, based_attention_at
from zoo.kernels.linear import Linear
from zoo.kernels.linear.split import linear_parts
from zoo.kernels.rows import rows_at
from zoo.errors import ConfigError
from zoo.mixers.short_conv import ShortConv
from zoo.mixers.registry import register_mixer


class BaseConv(nn.Module):
    """Gated short convolution with a residual, Zoology's definition: (B, L, D) -> (B, L, D)."""

    def __init__(self, d_model: int, conv_kernel: int):
        super().__init__()
        self.proj = Linear(d_model, d_model)
        self.conv = ShortConv(d_model, conv_kernel)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        if positions is None:
            return x + self.proj(x) * self.conv(x)
        x_at = rows_at(x, positions)
        return x_at + self.proj(x_at) * rows_at(self.conv(x), positions)

    def state_numel(self) -> int:
        return self.conv.state_numel()


class TaylorLinearAttention(nn.Module):
    """q, k: D -> H*F features, v: D -> D split into H heads; (B, L, D) -> (B, L, D)."""

    def __init__(self, d_model: int, feature_dim: int, num_heads: int):
        super().__init__()
        self.h, self.f = num_heads, feature_dim
        self.q_proj = nn.Linear(d_model, num_heads * feature_dim, bias=False)
        self.k_proj = nn.Linear(d_model, num_heads * feature_dim, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_proj = Linear(d_model, d_model, bias=False)  # Zoology: proj_o (no "out_proj" scaled init)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone: their queries
        attend through the quadratic form (``based_attention_at``), o_proj on those rows."""
        B, L, D = x.shape
        qk_shape, v_shape = (B, L, self.h, self.f), (B, L, self.h, D // self.h)
        weights = [self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]
        if positions is None:  # x cast once for the three projections, its gradient summed inside their matmuls
            q, k, v = linear_parts(x, weights)
            o = based_attention(q.view(qk_shape), k.view(qk_shape), v.view(v_shape))
        else:
            k, v = linear_parts(x, weights[1:])
            (q,) = linear_parts(rows_at(x, positions), weights[:1])
            o = based_attention_at(q.view(B, -1, self.h, self.f), k.view(qk_shape), v.view(v_shape), positions)
        return self.o_proj(o.reshape(*o.shape[:2], D))

    def state_numel(self) -> int:
        expanded = 1 + self.f + self.f * (self.f + 1) // 2  # Taylor features, x x^T kept once per pair
        dv = self.v_proj.out_features // self.h
        return self.h * expanded * (dv + 1)  # sum phi(k) v^T and the normalizer sum phi(k)


@register_mixer("based")
class Based(nn.Module):
    """Alternating BaseConv / Taylor linear attention layers: (B, L, D) -> (B, L, D).

    Args:
        d_model: D.
        feature_dim: F, query/key feature size per head before the Taylor expansion (8, Zoology's
            figure 2; its class default is 16).
        num_heads: heads of the linear attention (1); must divide D.
        conv_kernel: length of BaseConv's causal conv (3).
    """

    outputs_at_positions = True  # forward(x, positions): each layer's last projection on those rows alone

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, feature_dim: int = 8,
                 num_heads: int = 1, conv_kernel: int = 3):
        super().__init__()
        if feature_dim < 1:
            raise ConfigError("model.mixer_kwargs.feature_dim", feature_dim, "an integer >= 1 (8 or 16 in Zoology)")
        if num_heads < 1 or d_model % num_heads:
            raise ConfigError("model.mixer_kwargs.num_heads", num_heads, f"a divisor of d_model={d_model}")
        if conv_kernel < 1:
            raise ConfigError("model.mixer_kwargs.conv_kernel", conv_kernel, "an integer >= 1")
        if layer_idx % 2 == 0:
            self.inner = BaseConv(d_model, conv_kernel)
        else:
            self.inner = TaylorLinearAttention(d_model, feature_dim, num_heads)
        # the linear attention's x reaches its projections alone: the norm before it may write autocast's dtype
        self.input_feeds_one_matmul = layer_idx % 2 == 1

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the
        layer's last projection on those rows."""
        return self.inner(x, positions)

    def state_size(self, seq_len: int) -> int:
        """Values per sequence: the conv's last ``conv_kernel - 1`` inputs, or the linear attention's
        running sums over the Taylor features (``1 + F + F(F+1)/2`` of them, the symmetric ``x x^T``
        counted once) times ``(Dv + 1)`` per head: the value sums and the normalizer."""
        return self.inner.state_numel()
