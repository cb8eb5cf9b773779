"""Rows of [B, L, ...] tensors at per-sequence positions: a training step's labelled rows.

Plain PyTorch, imported by the model and the mixers on every machine (no Triton: a CPU install has none).
"""
from __future__ import annotations

import torch


def rows_at(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [B, L, ...] at ``positions`` [B, K] (int64, each in [0, L)) -> [B, K, ...]: a gather along dim 1."""
    index = positions.view(*positions.shape, *(1,) * (x.dim() - 2)).expand(*positions.shape, *x.shape[2:])
    return x.gather(1, index)
