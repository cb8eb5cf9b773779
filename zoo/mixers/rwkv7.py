"""RWKV-7 "Goose" time mixing (Peng et al. 2025), the dynamic-state-evolution recurrence.

Per head, with state S: (K, V) and per-step log decay w_t < 0::

    S_t = diag(exp(w_t)) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T,   o_t = S_t^T r_t
    a_t = -kk_t, b_t = kk_t * iclr_t   (kk: normalized key, iclr: in-context learning rate)

Layer 0's values ``v_first`` travel to later layers through the model's ``layer_state`` dict and are
mixed into their values. GPU: fla's ``chunk_rwkv7``; CPU: ``rwkv7_recurrence_ref``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.errors import ConfigError
from zoo.mixers.fastpath import fast_module
from zoo.registry import register_mixer

W_SCALE = 0.6065306597126334  # exp(-0.5): per-step log decay lies in (-W_SCALE, 0)


def rwkv7_recurrence_ref(r, w, k, v, a, b) -> torch.Tensor:
    """The state recurrence above, step by step in float32.

    r, w, k, a, b: (B, L, H, K); v: (B, L, H, V) -> o: (B, L, H, V).
    """
    r, w, k, v, a, b = (t.float() for t in (r, w, k, v, a, b))
    Bt, L, H, K = r.shape
    S = r.new_zeros(Bt, H, K, v.shape[-1])
    out = []
    for t in range(L):
        sa = torch.einsum("bhk,bhkv->bhv", a[:, t], S)
        S = S * torch.exp(w[:, t])[..., None] + b[:, t, :, :, None] * sa[:, :, None] + k[:, t, :, :, None] * v[:, t, :, None]
        out.append(torch.einsum("bhk,bhkv->bhv", r[:, t], S))
    return torch.stack(out, dim=1)


class LoRA(nn.Module):
    """D -> rank -> out with an optional activation in between: (..., D) -> (..., out)."""

    def __init__(self, d_in: int, d_out: int, rank: int, activation: nn.Module | None, bias: bool = True):
        super().__init__()
        self.down = nn.Linear(d_in, rank, bias=False)
        self.act = activation or nn.Identity()
        self.up = nn.Linear(rank, d_out, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_out)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(self.act(self.down(x)))
        return y if self.bias is None else y + self.bias.to(y.dtype)


@register_mixer("rwkv7")
class RWKV7(nn.Module):
    """RWKV-7 time mixing: (B, L, D) -> (B, L, D).

    Args:
        d_model: D.
        head_dim: K = V per head (64); must divide D.
        decay_rank, iclr_rank, value_rank, gate_rank: LoRA ranks of w, a, v-mix and the output gate.
    """

    uses_layer_state = True

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, head_dim: int = 64,
                 decay_rank: int = 32, iclr_rank: int = 32, value_rank: int = 32, gate_rank: int = 64):
        super().__init__()
        if head_dim < 1 or d_model % head_dim:
            raise ConfigError("model.mixer_kwargs.head_dim", head_dim, f"a divisor of d_model={d_model}")
        for key, rank in (("decay_rank", decay_rank), ("iclr_rank", iclr_rank), ("value_rank", value_rank),
                          ("gate_rank", gate_rank)):
            if rank < 1:
                raise ConfigError(f"model.mixer_kwargs.{key}", rank, "an integer >= 1")
        D, self.layer_idx, self.head_dim, self.n_heads = d_model, layer_idx, head_dim, d_model // head_dim
        n = torch.arange(D) / (D - 1)
        zigzag = ((torch.arange(D) % head_dim) - (head_dim - 1) / 2) / ((head_dim - 1) / 2)
        zigzag = zigzag * zigzag.abs()
        self.mix = nn.Parameter((1 - (torch.arange(D) / D) ** torch.tensor([0.2, 0.9, 0.7, 0.7, 0.9, 0.2])[:, None]))
        self.r_proj = nn.Linear(D, D, bias=False)
        self.k_proj = nn.Linear(D, D, bias=False)
        self.v_proj = nn.Linear(D, D, bias=False)
        self.w_lora = LoRA(D, D, decay_rank, nn.Tanh())
        self.a_lora = LoRA(D, D, iclr_rank, None)
        self.g_lora = LoRA(D, D, gate_rank, nn.Sigmoid(), bias=False)
        self.v_lora = LoRA(D, D, value_rank, None) if layer_idx > 0 else None
        with torch.no_grad():
            self.w_lora.bias.copy_(-6 + 6 * n ** 1.0 + 0.5 + 2.5 * zigzag)
            self.a_lora.bias.copy_(-0.19 + 0.3 * zigzag + 0.4 * (n - 0.5))
            if self.v_lora is not None:
                self.v_lora.bias.copy_(0.73 - 0.4 * (n - 0.5))
        self.k_k = nn.Parameter(0.71 - 0.1 * (n - 0.5))
        self.k_a = nn.Parameter(torch.full((D,), 1.02))
        self.r_k = nn.Parameter(torch.full((self.n_heads, head_dim), -0.04))
        self.g_norm = nn.GroupNorm(self.n_heads, D, eps=head_dim * 1e-5)
        self.out_proj = nn.Linear(D, D, bias=False)

    def forward(self, x: torch.Tensor, layer_state: dict | None = None) -> torch.Tensor:
        Bt, L, D = x.shape
        H, K = self.n_heads, self.head_dim
        shifted = F.pad(x, (0, 0, 1, -1))
        xr, xw, xk, xv, xa, xg = (x + (shifted - x) * m for m in self.mix.to(x.dtype))
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
        fla = fast_module("fla.ops.rwkv7", "rwkv7 on GPU (falls back to the PyTorch recurrence)", x)
        if fla is not None:
            o, _ = fla.chunk_rwkv7(r=r, w=w.to(r.dtype), k=k, v=v, a=-kk, b=kk * a, scale=1.0, safe_gate=True,
                                   lower_bound=-W_SCALE, chunk_size=64)
        else:
            o = rwkv7_recurrence_ref(r, w, k, v, -kk, kk * a)
        o = self.g_norm(o.reshape(Bt * L, D).float()).view(Bt, L, H, K)
        o = o + (r * k * self.r_k).sum(-1, keepdim=True).float() * v.float()  # the "bonus" of the current token
        return self.out_proj((o.reshape(Bt, L, D) * g.float()).to(x.dtype))

    def state_size(self, seq_len: int) -> int:
        """Bytes per sequence: H (K, V) states plus the shifted token."""
        return 4 * (self.n_heads * self.head_dim ** 2 + self.n_heads * self.head_dim)
