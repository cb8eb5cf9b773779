"""Pieces shared by the linear-attention mixers that follow flash-linear-attention's layers.

Used by ``gla``, ``retnet``, ``hgrn2``, ``deltanet`` and ``gated_deltanet``: the checked split of an
expanded width into heads, fla's output normalization (``RMSNorm`` / ``FusedRMSNormGated``), and the read-out of
the recurrence's output through it (at the last block's labelled rows alone where asked).
"""
from __future__ import annotations

import torch
from torch import nn

from zoo.errors import ConfigError
from zoo.kernels.layer_norm import rms_norm
from zoo.kernels.rows import rows_at


def check_num_heads(num_heads: int) -> None:
    if not isinstance(num_heads, int) or num_heads < 1:
        raise ConfigError("model.mixer_kwargs.num_heads", num_heads, "an integer >= 1")


def expanded_dim(d_model: int, expand: float, num_heads: int, key: str) -> int:
    """``d_model * expand`` as an integer width that ``num_heads`` divides; ConfigError naming the culprit else."""
    width = d_model * expand
    if expand <= 0 or width != round(width):
        raise ConfigError(f"model.mixer_kwargs.{key}", expand, f"a positive ratio with d_model={d_model} * {key} an integer")
    if round(width) % num_heads:
        raise ConfigError("model.mixer_kwargs.num_heads", num_heads, f"a divisor of d_model * {key} = {round(width)}")
    return round(width)


class HeadRMSNorm(nn.Module):
    """RMSNorm over each head's channels (weight, eps 1e-5, computed in float32), then times swish(gate)
    when a gate is given: fla's ``RMSNorm`` and ``FusedRMSNormGated``. o, gate: [..., V] -> [..., V] in o's
    dtype. One fused kernel on GPU (``zoo.kernels.layer_norm.rms_norm``).
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, o: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        return rms_norm(o, self.weight, self.eps, gate, out_dtype=o.dtype)


def gated_read_out(o: torch.Tensor, x: torch.Tensor, positions: torch.Tensor | None, norm: HeadRMSNorm,
                   gate: nn.Linear | None, out: nn.Linear) -> torch.Tensor:
    """``out(norm(o, gate(x)))``: the recurrence's output o [B, L, H, V] normed per head (times swish of the gate's
    projection of the layer's input x [B, L, D], if a gate is given) and projected -> [B, L, D]; with ``positions``
    [B, K], at those rows alone -> [B, K, D] (the same numbers as the full read-out's rows)."""
    if positions is not None:
        o = rows_at(o, positions)
        x = x if gate is None else rows_at(x, positions)
    o = norm(o, None if gate is None else gate(x).view(o.shape))
    return out(o.flatten(2))
