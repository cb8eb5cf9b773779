"""The reference: the logits by ``F.linear``, then PyTorch's cross-entropy on them cast to float32."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.cross_entropy.naive import cross_entropy_naive


def linear_cross_entropy_naive(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                               ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy of x [R, D] @ weight [V, D]^T over the rows whose target [R] is not ``ignore_index``."""
    return cross_entropy_naive(F.linear(x, weight), targets, ignore_index)
