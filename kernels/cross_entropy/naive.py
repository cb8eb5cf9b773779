"""The reference loss: PyTorch's cross-entropy on the logits cast to float32."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy_naive(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy over the rows of logits [R, V] whose target [R] is not ``ignore_index``, in float32
    at least (NaN when no row has a target, as PyTorch gives)."""
    return F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), targets,
                           ignore_index=ignore_index)
