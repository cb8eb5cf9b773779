"""Memory layout helpers shared by zoo's Triton kernels."""
from __future__ import annotations

import torch


def last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    """x itself when its last dim has stride 1 (the kernels' vector loads need it), else a contiguous copy."""
    return x if x.stride(-1) == 1 else x.contiguous()
