"""RWKV-4 time mixing (Peng et al. 2023), the RWKV baseline of Zoology and the GatedFWA paper.

Token shift mixes each token with the previous one, then ``k, v, r`` projections, the WKV operator
(``kernels/wkv4``: a per-channel decayed, normalized average of past values with a bonus ``u`` for
the current token), the receptance gate ``sigmoid(r)`` and ``out_proj``. GPU: our Triton WKV;
CPU: the PyTorch recurrence.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from kernels.wkv4.naive import wkv4_naive
from zoo.mixers.fastpath import fast_module
from zoo.registry import register_mixer


def wkv(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """WKV: w, u: (C,); k, v: (B, L, C) -> float32 (B, L, C); Triton on GPU, the recurrence elsewhere."""
    fused = fast_module("kernels.wkv4.fused_recurrent", "rwkv on GPU (falls back to the PyTorch recurrence)", k)
    return wkv4_naive(w, u, k, v) if fused is None else fused.wkv4(w, u, k, v)


@register_mixer("rwkv")
class RWKV4(nn.Module):
    """RWKV-4 time mixing: (B, L, D) -> (B, L, D). No keyword arguments."""

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048):
        super().__init__()
        D = d_model
        frac = torch.arange(D) / max(D - 1, 1)
        ddd = torch.arange(D) / D
        self.time_decay = nn.Parameter(-5 + 8 * frac ** 0.7)  # per-step decay rate w = exp(time_decay)
        self.time_first = nn.Parameter(math.log(0.3) + 0.5 * ((torch.arange(D) + 1) % 3 - 1))
        self.time_mix_k = nn.Parameter(ddd.clone())
        self.time_mix_v = nn.Parameter(ddd.clone())
        self.time_mix_r = nn.Parameter(ddd ** 0.5)
        self.key = nn.Linear(D, D, bias=False)
        self.value = nn.Linear(D, D, bias=False)
        self.receptance = nn.Linear(D, D, bias=False)
        self.out_proj = nn.Linear(D, D, bias=False)
        self.d_model = D

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        prev = F.pad(x, (0, 0, 1, -1))  # token shift: x_{t-1}, zeros at t=0
        xk = torch.lerp(prev, x, self.time_mix_k.to(x.dtype))
        xv = torch.lerp(prev, x, self.time_mix_v.to(x.dtype))
        xr = torch.lerp(prev, x, self.time_mix_r.to(x.dtype))
        y = wkv(torch.exp(self.time_decay.float()), self.time_first.float(), self.key(xk), self.value(xv))
        return self.out_proj(torch.sigmoid(self.receptance(xr)) * y.to(x.dtype))

    def state_size(self, seq_len: int) -> int:
        """Bytes per sequence: WKV numerator, denominator and max exponent, plus the shifted token."""
        return 4 * 4 * self.d_model
