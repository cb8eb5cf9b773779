"""The reference linear layer: PyTorch's ``F.linear``."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def linear_naive(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T + bias [N] -> [..., N] (autocast applies as to ``F.linear``)."""
    return F.linear(x, weight, bias)
