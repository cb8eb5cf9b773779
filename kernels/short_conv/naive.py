"""The reference short convolution: PyTorch's grouped ``F.conv1d`` on the channel-first layout, as ``nn.Conv1d``
computes it (two transposes, padding K - 1 on both sides, the last T outputs kept), then the optional silu."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def short_conv_naive(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     activation: str | None = None) -> torch.Tensor:
    """x [B, T, C]; weight [C, K]; bias [C] or None -> [B, T, C]: ``conv(x) + bias``, then silu if ``activation``
    is ``"silu"``."""
    T, (C, K) = x.shape[1], weight.shape
    y = F.conv1d(x.transpose(1, 2), weight[:, None], bias, padding=K - 1, groups=C)[..., :T].transpose(1, 2)
    return F.silu(y) if activation == "silu" else y
