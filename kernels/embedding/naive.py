"""The reference embedding: PyTorch's own ``F.embedding`` (its backward sorts the ids and sums segments)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def embedding_naive(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Rows of weight [V, D] at ids [...] -> [..., D]."""
    return F.embedding(ids, weight)
