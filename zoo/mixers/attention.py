"""Softmax attention and sliding-window attention (SWA) mixers.

Both project x (B, L, D) to q, k, v of shape (B, L, H, D/H), attend causally and project back.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kernels.gatedfwa import gated_window_attention
from zoo.errors import ConfigError
from zoo.registry import register_mixer


class MultiHeadMixer(nn.Module):
    """Shared q/k/v and output projections; subclasses implement ``attend(q, k, v, x)``.

    Args:
        d_model: model width D.
        num_heads: H; D must be divisible by H.
        bias: biases in the projections.
    """

    position_embeddings_by_default = True

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 2,
                 bias: bool = False):
        super().__init__()
        if num_heads < 1 or d_model % num_heads:
            raise ConfigError("model.mixer_kwargs.num_heads", num_heads, f"a divisor of d_model={d_model}")
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.num_heads, self.head_dim).unbind(2)
        return self.out_proj(self.attend(q, k, v, x).reshape(B, L, -1))

    def attend(self, q, k, v, x):  # pragma: no cover - abstract
        raise NotImplementedError


@register_mixer("softmax")
class SoftmaxAttention(MultiHeadMixer):
    """Causal multi-head softmax attention through ``F.scaled_dot_product_attention``."""

    def attend(self, q, k, v, x):
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return o.transpose(1, 2)

    def state_size(self, seq_len: int) -> int:
        """The KV cache: 2 * L * D values of 2 bytes (bf16)."""
        return 2 * seq_len * self.num_heads * self.head_dim * 2


@register_mixer("swa")
class SlidingWindowAttention(MultiHeadMixer):
    """Sliding-window attention: query i sees keys i - window < j <= i.

    Args:
        window: width w; None means ``max_seq_len // 2`` (the GatedFWA paper's MQAR setup).
    """

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 2,
                 bias: bool = False, window: int | None = None):
        super().__init__(d_model, layer_idx, max_seq_len, num_heads, bias)
        self.window = max_seq_len // 2 if window is None else window
        if self.window < 1:
            raise ConfigError("model.mixer_kwargs.window", window, "an integer >= 1")

    def attend(self, q, k, v, x):
        return gated_window_attention(q, k, v, None, self.window)

    def state_size(self, seq_len: int) -> int:
        """The rolling KV cache of the last ``window`` tokens, bf16."""
        return 2 * min(seq_len, self.window) * self.num_heads * self.head_dim * 2
