"""The reference embedding: PyTorch's own ``F.embedding`` (its backward sorts the ids and sums segments), and with
learned positions and dropout after it."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def embedding_naive(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Rows of weight [V, D] at ids [...] -> [..., D]."""
    return F.embedding(ids, weight)


def embedding_dropout_naive(ids: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor | None,
                            p: float) -> torch.Tensor:
    """dropout(weight[ids] + positions, p), in training, for ids [B, L] and positions [L, D] or None."""
    x = F.embedding(ids, weight)
    return F.dropout(x if positions is None else x + positions, p, training=True)
