"""Rotary position embedding (RoPE, Su et al. 2021) of queries and keys, for ``model.positions: rope``.

Channel pairs are the two halves of a head, ``(x[..., i], x[..., i + D/2])``, rotated by the angle
``-t * base^(-2i/D)`` at position ``t``: the convention of the GatedFWA authors' released layer
(nanochat ``apply_rotary_emb``), so zoo's ``variant="released"`` matches it. GPT-NeoX rotates by
``+t * ...``; the two represent the same functions (q_i . k_j depends on i - j either way).
"""
from __future__ import annotations

import torch


def apply_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate x (B, T, H, D), D even, by its positions 0..T-1; returns (B, T, H, D) in x's dtype.

    The angles are computed in float32 on each call (cheap next to attention, and no buffer that a
    meta-device build or a dtype cast could spoil).
    """
    T, D = x.shape[1], x.shape[-1]
    if D % 2:
        raise ValueError(f"RoPE needs an even head dimension, got {D}")
    inv_freq = base ** -(torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D)
    angles = torch.outer(torch.arange(T, device=x.device, dtype=torch.float32), inv_freq)  # (T, D/2)
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]  # (T, 1, D/2)
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1).to(x.dtype)
