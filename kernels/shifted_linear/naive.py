"""The reference: the token-shift mixes as tensors of their own (``token_shift_mix_naive``), then one ``F.linear``
per projection, each reading its mix, the outputs side by side."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.token_shift.naive import token_shift_mix_naive


def shifted_linear_naive(x: torch.Tensor, mixes: torch.Tensor, weights: list[torch.Tensor],
                         mix_of: tuple[int, ...]) -> torch.Tensor:
    """x [B, T, D]; mixes [G, D]; weights[i] [N_i, D] reads mix ``mix_of[i]`` -> [B, T, N], N = sum N_i: the parts
    ``F.linear(x + (x_prev - x) * mixes[mix_of[i]], weights[i])`` side by side, the mixes made in the matmul's
    dtype."""
    mixed = token_shift_mix_naive(x, mixes, out_dtype=matmul_dtype(x))
    return torch.cat([F.linear(mixed[g], w) for g, w in zip(mix_of, weights)], -1)
