"""DeltaNet (Yang et al. 2024) and Gated DeltaNet (Yang et al. 2025), as fla 0.6.0's ``DeltaNet`` and
``GatedDeltaNet`` layers.

Both layers, per head::

    q, k = silu(conv(x W_q)), silu(conv(x W_k))  [B, T, H, K], then unit length over K
    v = silu(conv(x W_v))  [B, T, H, V];  beta = sigmoid(x W_b)  [B, T, H]   (times 2, see below)
    S_t = (I - beta_t k_t k_t^T) a_t S_{t-1} + beta_t k_t v_t^T,  o_t = K^-1/2 S_t^T q_t

with a_t = 1 (DeltaNet) or a_t = exp(-exp(A_log) softplus(x W_a + dt_bias)) (Gated DeltaNet), and
``conv`` a causal depthwise convolution of length 4. Outputs: DeltaNet ``W_o RMSNorm_head(o)``; Gated
DeltaNet ``W_o (RMSNorm_head(o) * swish(x W_g))``. The recurrence is ``zoo.kernels.delta_rule``: fla's
``chunk_delta_rule`` / ``chunk_gated_delta_rule`` on GPU (where fla's chunks are unreliable, its fused recurrence
for DeltaNet and zoo's chunked PyTorch form for Gated DeltaNet), the PyTorch recurrence on CPU.

``negative_eigenvalues=True`` doubles beta to (0, 2), so the transition along k_t, 1 - beta_t, reaches
into (-1, 1): fla's ``allow_neg_eigval``, from Grazzi et al. 2024, which lets one layer track parity.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from zoo.kernels.delta_rule import delta_rule
from zoo.errors import ConfigError
from zoo.mixers.linear_blocks import HeadRMSNorm, check_num_heads, expanded_dim, gated_read_out
from zoo.mixers.registry import register_mixer
from zoo.mixers.short_conv import ShortConv


class DeltaRuleLayer(nn.Module):
    """What DeltaNet and Gated DeltaNet share: (B, L, D) -> (B, L, D).

    Args:
        d_model: D.
        num_heads: H.
        key_dim, value_dim: H*K and H*V.
        conv_size: length of the causal convolutions on q, k and v.
        negative_eigenvalues: beta in (0, 2) instead of (0, 1).
        output_gate: swish-gated output norm (Gated DeltaNet) or a plain one (DeltaNet).
    """

    outputs_at_positions = True  # forward(x, positions): the output norm, its gate and o_proj on those rows alone

    def __init__(self, d_model: int, num_heads: int, key_dim: int, value_dim: int, conv_size: int,
                 negative_eigenvalues: bool, output_gate: bool):
        super().__init__()
        if not isinstance(conv_size, int) or conv_size < 1:
            raise ConfigError("model.mixer_kwargs.conv_size", conv_size, "an integer >= 1 (fla: 4)")
        if not isinstance(negative_eigenvalues, bool):
            raise ConfigError("model.mixer_kwargs.negative_eigenvalues", negative_eigenvalues, [False, True])
        self.num_heads, self.key_dim, self.value_dim = num_heads, key_dim, value_dim
        self.negative_eigenvalues = negative_eigenvalues
        self.q_proj = nn.Linear(d_model, key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, value_dim, bias=False)
        self.b_proj = nn.Linear(d_model, num_heads, bias=False)
        self.q_conv = ShortConv(key_dim, conv_size, bias=False, activation="silu")
        self.k_conv = ShortConv(key_dim, conv_size, bias=False, activation="silu")
        self.v_conv = ShortConv(value_dim, conv_size, bias=False, activation="silu")
        self.g_proj = nn.Linear(d_model, value_dim, bias=False) if output_gate else None
        self.o_norm = HeadRMSNorm(value_dim // num_heads)
        self.o_proj = nn.Linear(value_dim, d_model, bias=False)

    def log_decay(self, x: torch.Tensor) -> torch.Tensor | None:
        """log a_t: [B, L, H], or None for no decay."""
        return None

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the
        output norm (with Gated DeltaNet's gate) and o_proj on those rows; the recurrence still walks every row."""
        B, L, _ = x.shape
        H = self.num_heads
        q = self.q_conv(self.q_proj(x)).view(B, L, H, -1)
        k = self.k_conv(self.k_proj(x)).view(B, L, H, -1)
        v = self.v_conv(self.v_proj(x)).view(B, L, H, -1)
        beta = torch.sigmoid(self.b_proj(x).float()) * (2 if self.negative_eigenvalues else 1)
        o = delta_rule(q, k, v, beta, self.log_decay(x), l2norm_qk=True)
        return gated_read_out(o, x, positions, self.o_norm, self.g_proj, self.o_proj)

    def state_size(self, seq_len: int) -> int:
        """Values of recurrent state per sequence: H states of (K, V) plus the q, k, v conv windows."""
        convs = self.q_conv.state_numel() + self.k_conv.state_numel() + self.v_conv.state_numel()
        return self.key_dim * self.value_dim // self.num_heads + convs


@register_mixer("deltanet")
class DeltaNet(DeltaRuleLayer):
    """DeltaNet: (B, L, D) -> (B, L, D). fla's layer defaults (beta, short convs, silu + L2 q/k, no output gate).

    Args:
        d_model: D.
        num_heads: H (4); must divide D * expand_k and D * expand_v.
        expand_k, expand_v: key and value widths H*K, H*V as multiples of D (1.0, 1.0).
        conv_size: causal conv length on q, k, v (4).
        negative_eigenvalues: beta in (0, 2), fla's ``allow_neg_eigval`` (False).
    """

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 4,
                 expand_k: float = 1.0, expand_v: float = 1.0, conv_size: int = 4,
                 negative_eigenvalues: bool = False):
        check_num_heads(num_heads)
        super().__init__(d_model, num_heads, expanded_dim(d_model, expand_k, num_heads, "expand_k"),
                         expanded_dim(d_model, expand_v, num_heads, "expand_v"), conv_size, negative_eigenvalues,
                         output_gate=False)


@register_mixer("gated_deltanet")
class GatedDeltaNet(DeltaRuleLayer):
    """Gated DeltaNet: (B, L, D) -> (B, L, D). fla's layer defaults except the head sizes.

    fla's ``head_dim=256, num_heads=6`` are sized for hidden_size 2048; zoo's default splits D into 4
    heads (K = D / 4, like DeltaNet's default) so every d_model of the grid builds. ``head_dim=256,
    num_heads=6`` restore fla's.

    Args:
        d_model: D.
        num_heads: H (4).
        head_dim: K per head (None: D // num_heads, which must then divide D).
        expand_v: V = expand_v * K per head (2.0).
        conv_size: causal conv length on q, k, v (4).
        negative_eigenvalues: beta in (0, 2), fla's ``allow_neg_eigval`` (False).
    """

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 4,
                 head_dim: int | None = None, expand_v: float = 2.0, conv_size: int = 4,
                 negative_eigenvalues: bool = False):
        check_num_heads(num_heads)
        if head_dim is None:
            if d_model % num_heads:
                raise ConfigError("model.mixer_kwargs.num_heads", num_heads,
                                  f"a divisor of d_model={d_model}, or set head_dim")
            head_dim = d_model // num_heads
        if not isinstance(head_dim, int) or head_dim < 1:
            raise ConfigError("model.mixer_kwargs.head_dim", head_dim, "an integer >= 1, or None for d_model // num_heads")
        head_v_dim = head_dim * expand_v
        if expand_v <= 0 or head_v_dim != round(head_v_dim):
            raise ConfigError("model.mixer_kwargs.expand_v", expand_v,
                              f"a positive ratio with head_dim={head_dim} * expand_v an integer")
        super().__init__(d_model, num_heads, num_heads * head_dim, num_heads * round(head_v_dim), conv_size,
                         negative_eigenvalues, output_gate=True)
        self.a_proj = nn.Linear(d_model, num_heads, bias=False)
        # fla's initialization: decay rates A in U(0, 16), time steps dt log-uniform in [1e-3, 0.1]
        self.A_log = nn.Parameter(torch.log(torch.empty(num_heads).uniform_(0, 16)))
        dt = torch.exp(torch.rand(num_heads) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp_min(1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)

    def log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """log a_t = -exp(A_log) softplus(x W_a + dt_bias): [B, L, H], float32."""
        return -self.A_log.float().exp() * F.softplus(self.a_proj(x).float() + self.dt_bias.float())
