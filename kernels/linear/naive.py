"""The reference linear layer: PyTorch's ``F.linear``, and its output read as per-head parts."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def linear_naive(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T + bias [N] -> [..., N] (autocast applies as to ``F.linear``)."""
    return F.linear(x, weight, bias)


def head_parts_naive(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, parts: int,
                     heads: int) -> tuple[torch.Tensor, ...]:
    """x [B, L, K] @ weight [N, K]^T + bias [N] -> ``parts`` views [B, L, heads, Dh] of the [B, L, parts, heads, Dh]
    output (autograd concatenates their gradients backward)."""
    B, L, _ = x.shape
    return F.linear(x, weight, bias).view(B, L, parts, heads, -1).unbind(2)
