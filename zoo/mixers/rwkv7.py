"""RWKV-7 "Goose" time mixing (Peng et al. 2025), the dynamic-state-evolution recurrence.

Per head, with state S: (K, V) and per-step log decay w_t < 0::

    S_t = diag(exp(w_t)) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T,   o_t = S_t^T r_t
    a_t = -kk_t, b_t = kk_t * iclr_t   (kk: normalized key, iclr: in-context learning rate)

Layer 0's values ``v_first`` travel to later layers through the model's ``layer_state`` dict and are
mixed into their values. The recurrence is ``zoo.kernels.rwkv7.rwkv7``: fla's ``chunk_rwkv7`` on GPU (zoo's Triton
fused recurrence where fla's chunks are unreliable), the PyTorch recurrence on CPU. The six token-shift mixes of the
input (x + (x_{t-1} - x) * x_*) are ``zoo.kernels.token_shift.token_shift_mix``: one Triton kernel each way on GPU.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.layer_norm import layer_norm
from zoo.kernels.rwkv7 import rwkv7
from zoo.kernels.token_shift import token_shift_mix
from zoo.errors import ConfigError
from zoo.mixers.registry import register_mixer

W_SCALE = 0.6065306597126334  # exp(-0.5): per-step log decay lies in (-W_SCALE, 0)


class LoRA(nn.Module):
    """D -> rank -> out with an optional activation in between: (..., D) -> (..., out).

    fla's initialisation: the down projection starts at zero, the up projection orthogonal with gain
    ``0.1 * max(1, sqrt(rank / out))``, the bias at zero (the layer then sets it).
    """

    def __init__(self, d_in: int, d_out: int, rank: int, activation: nn.Module | None, bias: bool = True):
        super().__init__()
        self.down = nn.Linear(d_in, rank, bias=False)
        self.act = activation or nn.Identity()
        self.up = nn.Linear(rank, d_out, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_out)) if bias else None
        with torch.no_grad():
            nn.init.zeros_(self.down.weight)
            nn.init.orthogonal_(self.up.weight, gain=0.1 * max(1.0, math.sqrt(rank / d_out)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(self.act(self.down(x)))
        return y if self.bias is None else y + self.bias.to(y.dtype)


def default_rank(d_model: int, head_dim: int, scale: float, per_head: bool = True) -> int:
    """fla's LoRA rank rule: ``scale * sqrt(D)`` (times ``head_dim / 64`` where ``per_head``) rounded to a
    multiple of 32, at least 32."""
    factor = head_dim / 64 if per_head else 1.0
    return max(32, int(round(scale * d_model ** 0.5 * factor / 32) * 32))


@register_mixer("rwkv7")
class RWKV7(nn.Module):
    """RWKV-7 time mixing: (B, L, D) -> (B, L, D), fla's ``RWKV7Attention`` (the reference) in zoo's names.

    Initialisation is fla's, which scales with depth: ``n_layers`` is the model's depth (the model passes
    it, like ``layer_idx``); token-shift mixes, the decay bias and the output norm's gain depend on
    ``layer_idx / n_layers``. The output projection starts at zero and the LoRA down projections too,
    as in fla and RWKV-LM.

    Args:
        d_model: D.
        head_dim: K = V per head (64); must divide D.
        decay_rank, iclr_rank, value_rank, gate_rank: LoRA ranks of w, a, v-mix and the output gate;
            None picks fla's rule (``default_rank``: 2.5, 2.5, 1.7 and 5 times sqrt(D), at least 32).
    """

    uses_layer_state = True

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, n_layers: int = 2,
                 head_dim: int = 64, decay_rank: int | None = None, iclr_rank: int | None = None,
                 value_rank: int | None = None, gate_rank: int | None = None):
        super().__init__()
        if head_dim < 1 or d_model % head_dim:
            raise ConfigError("model.mixer_kwargs.head_dim", head_dim, f"a divisor of d_model={d_model}")
        decay_rank = default_rank(d_model, head_dim, 2.5) if decay_rank is None else decay_rank
        iclr_rank = default_rank(d_model, head_dim, 2.5) if iclr_rank is None else iclr_rank
        value_rank = default_rank(d_model, head_dim, 1.7) if value_rank is None else value_rank
        gate_rank = default_rank(d_model, head_dim, 5.0, per_head=False) if gate_rank is None else gate_rank
        for key, rank in (("decay_rank", decay_rank), ("iclr_rank", iclr_rank), ("value_rank", value_rank),
                          ("gate_rank", gate_rank)):
            if not isinstance(rank, int) or rank < 1:
                raise ConfigError(f"model.mixer_kwargs.{key}", rank, "an integer >= 1 or None (fla's rule)")
        D, self.layer_idx, self.head_dim, self.n_heads = d_model, layer_idx, head_dim, d_model // head_dim
        ratio_0_to_1 = layer_idx / max(n_layers - 1, 1)
        ratio_1_to_almost0 = 1.0 - layer_idx / n_layers
        idx = torch.arange(D, dtype=torch.float64)
        linear = idx / (D - 1) - 0.5
        zigzag = ((idx % head_dim) - (head_dim - 1) / 2) / ((head_dim - 1) / 2)
        zigzag = zigzag * zigzag.abs()
        # token-shift mixes of the r, w, k, v, a, g inputs: x + (x_{t-1} - x) * x_*
        for name, exponent in (("x_r", 0.2), ("x_w", 0.9), ("x_k", 0.7), ("x_v", 0.7), ("x_a", 0.9), ("x_g", 0.2)):
            setattr(self, name, nn.Parameter((1 - (idx / D) ** (exponent * ratio_1_to_almost0)).float()))
        self.r_proj = nn.Linear(D, D, bias=False)
        self.k_proj = nn.Linear(D, D, bias=False)
        self.v_proj = nn.Linear(D, D, bias=False)
        self.w_lora = LoRA(D, D, decay_rank, nn.Tanh())
        self.a_lora = LoRA(D, D, iclr_rank, None)
        self.g_lora = LoRA(D, D, gate_rank, nn.Sigmoid(), bias=False)
        self.v_lora = LoRA(D, D, value_rank, None) if layer_idx > 0 else None
        self.k_k = nn.Parameter((0.71 - 0.1 * linear).float())
        self.k_a = nn.Parameter(torch.full((D,), 1.02))
        self.r_k = nn.Parameter(torch.full((self.n_heads, head_dim), -0.04))
        self.g_norm = nn.GroupNorm(self.n_heads, D, eps=head_dim * 1e-5)
        self.o_proj = nn.Linear(D, D, bias=False)
        with torch.no_grad():
            decay = -6 + 6 * (idx / (D - 1)) ** (1 + ratio_0_to_1 ** 0.3)
            self.w_lora.bias.copy_(decay + 0.5 + 2.5 * zigzag)
            self.a_lora.bias.copy_(-0.19 + 0.3 * zigzag + 0.4 * linear)
            if self.v_lora is not None:
                self.v_lora.bias.copy_(0.73 - 0.4 * linear)
            self.g_norm.weight.fill_(((layer_idx + 1) / n_layers) ** 0.7)
            nn.init.orthogonal_(self.r_proj.weight)
            nn.init.orthogonal_(self.k_proj.weight, gain=0.1)
            nn.init.orthogonal_(self.v_proj.weight)
            nn.init.zeros_(self.o_proj.weight)

    def forward(self, x: torch.Tensor, layer_state: dict | None = None) -> torch.Tensor:
        Bt, L, D = x.shape
        H, K = self.n_heads, self.head_dim
        # the six token-shift mixes x + (x_{t-1} - x) * x_* in one pass each way (on GPU), made in the dtype the
        # projections and LoRAs they feed read under autocast
        mixes = torch.stack([self.x_r, self.x_w, self.x_k, self.x_v, self.x_a, self.x_g])
        xr, xw, xk, xv, xa, xg = token_shift_mix(x, mixes, out_dtype=matmul_dtype(x))
        r, k, v = self.r_proj(xr), self.k_proj(xk), self.v_proj(xv)
        w = -W_SCALE * torch.sigmoid(self.w_lora(xw).float())
        if self.layer_idx == 0 or self.v_lora is None:
            if layer_state is not None:
                layer_state["v_first"] = v
        else:
            v_first = v if layer_state is None else layer_state.setdefault("v_first", v)
            v = torch.lerp(v, v_first, torch.sigmoid(self.v_lora(xv)))
        a = torch.sigmoid(self.a_lora(xa))
        g = self.g_lora(xg)
        kk = F.normalize((k * self.k_k).view(Bt, L, H, K).float(), dim=-1).to(k.dtype)
        k = k * (1 + (a - 1) * self.k_a)
        r, k, v, a, w = (t.view(Bt, L, H, K) for t in (r, k, v, a, w))
        o = rwkv7(r, w, k, v, -kk, kk * a, w_min=-W_SCALE)
        # g_norm is a GroupNorm with one group per head, i.e. a LayerNorm over each head's K values: zoo's norm
        # kernel per (token, head) row, then the per-channel affine (PyTorch's GroupNorm backward for its weight
        # and bias was the slowest kernel of this layer's step on an H100)
        o = layer_norm(o.float(), None, None, self.g_norm.eps)
        o = o * self.g_norm.weight.view(H, K) + self.g_norm.bias.view(H, K)
        o = o + (r * k * self.r_k).sum(-1, keepdim=True).float() * v.float()  # the "bonus" of the current token
        return self.o_proj((o.reshape(Bt, L, D) * g.float()).to(x.dtype))

    def state_size(self, seq_len: int) -> int:
        """Values per sequence: H (K, V) states plus the previous token for the shift: ``H K^2 + D``."""
        return self.n_heads * self.head_dim ** 2 + self.n_heads * self.head_dim
