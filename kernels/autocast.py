"""What autocast does to a matmul's inputs, for kernels that write a tensor only a matmul will read."""
from __future__ import annotations

import torch


def matmul_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype autocast casts a matmul's inputs to on x's device where autocast is on, else None (no cast)."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
