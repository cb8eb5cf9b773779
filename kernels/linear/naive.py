"""The reference linear layer: PyTorch's ``F.linear``, and its output read as per-head parts."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.rows import rows_at


def linear_naive(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T + bias [N] -> [..., N] (autocast applies as to ``F.linear``)."""
    return F.linear(x, weight, bias)


def head_parts_naive(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, parts: int,
                     heads: int, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """x [B, L, K] @ weight [N, K]^T + bias [N] -> ``parts`` views [B, L, heads, Dh] of the [B, L, parts, heads, Dh]
    output, the first gathered at ``rows`` [B, K'] where given (autograd concatenates their gradients backward)."""
    B, L, _ = x.shape
    outs = F.linear(x, weight, bias).view(B, L, parts, heads, -1).unbind(2)
    return outs if rows is None else (rows_at(outs[0], rows), *outs[1:])
