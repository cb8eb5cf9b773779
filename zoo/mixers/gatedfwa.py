"""GatedFWA: gated sliding-window attention with a cumulative decay bias (arXiv 2512.07782, sec. 3.3).

For x (B, L, D) and H heads of size d:
    q, k = RMSNorm(x W_q), RMSNorm(x W_k)                    (B, L, H, d), QK-normalized per head,
                                                             learnable gains start at g (see below)
    h = x W_g + b_g,  beta = 1 + elu(x W_beta)               (B, L, H), W_beta starts at zero (beta = 1),
                                                             b_g at initial decays alpha in [1e-3, 1e-1]
    alpha = softplus(beta * h) / (beta + eps),  u = cumsum(-alpha) over time
    o_i = sum_{i-w < j <= i} softmax_j(q_i.k_j / sqrt(d) + u_i - u_j) v_j
    y = W_o( RMSNorm_head(o) * silu(x W_z) )
The decay u_i - u_j <= 0 grows with distance, so old keys fade at a learned, input-dependent rate.

With unit QK-norm gains a logit is at most sqrt(d) (5.7 for d = 32): too flat to pick one key out of
a window, and small models stall on MQAR at accuracy 1/num_kv_pairs (guessing among the context's
values). The gains therefore start at g with g^2 * sqrt(d) = max(sqrt(d), log2(L^2 - L)), L = max_seq_len,
the starting temperature of QK-Norm (Henry et al. 2020); e.g. on the quickstart (d = 32, L = 64) the
mixer goes from 0.25 to 0.83 after 8 epochs, while the formula above is unchanged.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from kernels.gatedfwa import gate_cumsum, gated_window_attention
from zoo.mixers.attention import SlidingWindowAttention
from zoo.registry import register_mixer


@register_mixer("gatedfwa")
class GatedFWA(SlidingWindowAttention):
    """GatedFWA layer. Extra args: ``eps`` of the gate normalisation (beta + eps)."""

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 2,
                 bias: bool = False, window: int | None = None, eps: float = 1e-6):
        super().__init__(d_model, layer_idx, max_seq_len, num_heads, bias, window)
        self.eps = eps
        self.q_norm = nn.RMSNorm(self.head_dim)
        self.k_norm = nn.RMSNorm(self.head_dim)
        length = max(2, max_seq_len)
        max_logit = max(math.sqrt(self.head_dim), math.log2(length * length - length))
        gain = math.sqrt(max_logit / math.sqrt(self.head_dim))
        nn.init.constant_(self.q_norm.weight, gain)
        nn.init.constant_(self.k_norm.weight, gain)
        self.gate = nn.Linear(d_model, num_heads, bias=True)
        self.beta = nn.Linear(d_model, num_heads, bias=False)
        self.out_gate = nn.Linear(d_model, d_model, bias=bias)
        self.o_norm = nn.RMSNorm(self.head_dim)
        nn.init.zeros_(self.beta.weight)
        # gate bias: heads start with per-token decays alpha spread over [1e-3, 1e-1] (softplus^-1),
        # slow enough that recall across the window is possible from the first step
        alpha0 = torch.logspace(-3, -1, num_heads)
        with torch.no_grad():
            self.gate.bias.copy_(torch.log(torch.expm1(alpha0)))

    def attend(self, q, k, v, x):
        beta = 1 + F.elu(self.beta(x))
        u = gate_cumsum(self.gate(x), beta, eps=self.eps)
        o = gated_window_attention(self.q_norm(q), self.k_norm(k), v, u, self.window)
        z = self.out_gate(x).view_as(o)
        return self.o_norm(o) * F.silu(z)
