"""Gated Linear Attention (Yang et al. 2024), as fla 0.6.0's ``GatedLinearAttention`` layer.

Per head, with a data-dependent forget gate per key channel::

    q, k = x W_q, x W_k  [B, T, H, K];  v = x W_v  [B, T, H, V]
    g = logsigmoid(x W_g1 W_g2 + b) / 16           (low-rank gate, 16 = gate_logit_normalizer)
    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,  o_t = K^-1/2 S_t^T q_t
    y = W_o (RMSNorm_head(o) * swish(x W_r))

``zoo.kernels.gla``: fla's ``chunk_gla`` on GPU, the PyTorch recurrence on CPU. fla's defaults throughout (no
feature map, no short convolution, fused norm and swish output gate).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.kernels.gla import gla
from zoo.errors import ConfigError
from zoo.mixers.linear_blocks import HeadRMSNorm, check_num_heads, expanded_dim, gated_read_out
from zoo.mixers.registry import register_mixer


@register_mixer("gla")
class GatedLinearAttention(nn.Module):
    """GLA: (B, L, D) -> (B, L, D).

    Args:
        d_model: D.
        num_heads: H (4); must divide D * expand_k and D * expand_v.
        expand_k: key width H*K = expand_k * D (0.5).
        expand_v: value width H*V = expand_v * D (1.0).
        gate_low_rank_dim: rank of the forget-gate projection (16).
        gate_logit_normalizer: divides logsigmoid of the gate logits (16): slower forgetting.
    """

    outputs_at_positions = True  # forward(x, positions): the output norm, its gate and o_proj on those rows alone

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 4,
                 expand_k: float = 0.5, expand_v: float = 1.0, gate_low_rank_dim: int = 16,
                 gate_logit_normalizer: float = 16):
        super().__init__()
        check_num_heads(num_heads)
        key_dim = expanded_dim(d_model, expand_k, num_heads, "expand_k")
        value_dim = expanded_dim(d_model, expand_v, num_heads, "expand_v")
        if gate_low_rank_dim < 1:
            raise ConfigError("model.mixer_kwargs.gate_low_rank_dim", gate_low_rank_dim, "an integer >= 1")
        if gate_logit_normalizer <= 0:
            raise ConfigError("model.mixer_kwargs.gate_logit_normalizer", gate_logit_normalizer, "a number > 0")
        self.num_heads, self.key_dim, self.value_dim = num_heads, key_dim, value_dim
        self.gate_logit_normalizer = gate_logit_normalizer
        self.q_proj = nn.Linear(d_model, key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, value_dim, bias=False)
        self.g_proj = nn.Linear(d_model, value_dim, bias=False)
        self.gk_proj = nn.Sequential(nn.Linear(d_model, gate_low_rank_dim, bias=False),
                                     nn.Linear(gate_low_rank_dim, key_dim, bias=True))
        self.o_norm = HeadRMSNorm(value_dim // num_heads)
        self.o_proj = nn.Linear(value_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the
        output norm (with its gate) and o_proj on those rows; the recurrence still walks every row."""
        B, L, _ = x.shape
        H = self.num_heads
        q = self.q_proj(x).view(B, L, H, -1)
        k = self.k_proj(x).view(B, L, H, -1)
        v = self.v_proj(x).view(B, L, H, -1)
        gk = (F.logsigmoid(self.gk_proj(x).float()) / self.gate_logit_normalizer).view(B, L, H, -1)
        return gated_read_out(gla(q, k, v, gk), x, positions, self.o_norm, self.g_proj, self.o_proj)

    def state_size(self, seq_len: int) -> int:
        """Values of recurrent state per sequence: H states of (K, V)."""
        return self.key_dim * self.value_dim // self.num_heads
