"""RetNet's multi-scale retention (Sun et al. 2023), as fla 0.6.0's ``MultiScaleRetention`` layer.

Per head h, a fixed decay gamma_h = 1 - 2^(-5-h) and rotary positions on q and k::

    q, k = RoPE(x W_q), RoPE(x W_k)  [B, T, H, K];  v = x W_v  [B, T, H, V]
    S_t = gamma_h S_{t-1} + k_t v_t^T,  o_t = K^-1/2 S_t^T q_t
    y = W_o (RMSNorm_head(o) * swish(x W_g))

i.e. gated linear attention with a constant gate, ``zoo.kernels.retention``: fla's ``chunk_retention`` on GPU,
the PyTorch recurrence on CPU. fla's defaults throughout (8 heads, expand_k 1, expand_v 2, no
feature map, no short convolution, fused norm and swish output gate, rotary base 10000, not interleaved).
"""
from __future__ import annotations

import torch
from torch import nn

from zoo.kernels.retention import retention
from zoo.errors import ConfigError
from zoo.mixers.linear_blocks import HeadRMSNorm, check_num_heads, expanded_dim, gated_read_out
from zoo.mixers.registry import register_mixer


def rotary(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding, halves rotated (not interleaved), positions 0 .. T-1: [B, T, H, K] -> same."""
    T, K = x.shape[1], x.shape[-1]
    inv_freq = base ** -(torch.arange(0, K, 2, device=x.device, dtype=torch.float32) / K)
    angle = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv_freq  # [T, K/2]
    cos, sin = (f(angle).repeat(1, 2)[:, None] for f in (torch.cos, torch.sin))  # [T, 1, K]
    x1, x2 = x.float().chunk(2, dim=-1)
    return (x.float() * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


@register_mixer("retnet")
class MultiScaleRetention(nn.Module):
    """Multi-scale retention: (B, L, D) -> (B, L, D).

    Args:
        d_model: D.
        num_heads: H (8); must divide D * expand_k and D * expand_v, with an even K per head.
        expand_k: key width H*K = expand_k * D (1.0).
        expand_v: value width H*V = expand_v * D (2.0).
    """

    outputs_at_positions = True  # forward(x, positions): the output norm, its gate and o_proj on those rows alone

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 8,
                 expand_k: float = 1.0, expand_v: float = 2.0):
        super().__init__()
        check_num_heads(num_heads)
        key_dim = expanded_dim(d_model, expand_k, num_heads, "expand_k")
        value_dim = expanded_dim(d_model, expand_v, num_heads, "expand_v")
        if (key_dim // num_heads) % 2:
            raise ConfigError("model.mixer_kwargs.num_heads", num_heads,
                              f"a head count leaving an even key width per head for rotary (key width {key_dim})")
        self.num_heads, self.key_dim, self.value_dim = num_heads, key_dim, value_dim
        self.q_proj = nn.Linear(d_model, key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, value_dim, bias=False)
        self.g_proj = nn.Linear(d_model, value_dim, bias=False)
        self.o_norm = HeadRMSNorm(value_dim // num_heads)
        self.o_proj = nn.Linear(value_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the
        output norm (with its gate) and o_proj on those rows; the recurrence still walks every row."""
        B, L, _ = x.shape
        H = self.num_heads
        q = rotary(self.q_proj(x).view(B, L, H, -1))
        k = rotary(self.k_proj(x).view(B, L, H, -1))
        v = self.v_proj(x).view(B, L, H, -1)
        return gated_read_out(retention(q, k, v), x, positions, self.o_norm, self.g_proj, self.o_proj)

    def state_size(self, seq_len: int) -> int:
        """Values of recurrent state per sequence: H states of (K, V)."""
        return self.key_dim * self.value_dim // self.num_heads
