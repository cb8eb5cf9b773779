"""Plain PyTorch multi-scale retention (RetNet, Sun et al. 2023): gated linear attention with a fixed decay
gamma_h = 1 - 2^(-5-h) per head, run through ``zoo.kernels.gla.naive.gla_recurrent``.
"""
from __future__ import annotations

import torch

from zoo.kernels.gla.naive import gla_recurrent


def retention_log_decay(num_heads: int) -> torch.Tensor:
    """log gamma_h = log(1 - 2^(-5-h)) for h = 0 .. H-1: [H]."""
    return torch.log1p(-torch.exp2(-5.0 - torch.arange(num_heads, dtype=torch.float64))).float()


def retention_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """q, k: [B, T, H, K]; v: [B, T, H, V] -> o: [B, T, H, V]; scale K ** -0.5 when None (fla's default)."""
    g = retention_log_decay(q.shape[2]).to(q.device)[:, None]  # [H, 1], broadcast over B, T and K
    return gla_recurrent(q, k, v, g, scale)
