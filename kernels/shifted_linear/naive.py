"""The reference: the token-shift mixes as tensors of their own (``token_shift_mix_naive``), then one ``F.linear``
per projection, each reading its mix."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.token_shift.naive import token_shift_mix_naive


def shifted_linear_naive(x: torch.Tensor, mixes: torch.Tensor, weights: list[torch.Tensor],
                         mix_of: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """x [B, T, D]; mixes [G, D]; weights[i] [N_i, D] reads mix ``mix_of[i]`` -> a tensor [B, T, N_i] per weight:
    ``F.linear(x + (x_prev - x) * mixes[mix_of[i]], weights[i])``, the mixes made in the matmul's dtype."""
    mixed = token_shift_mix_naive(x, mixes, out_dtype=matmul_dtype(x))
    return tuple(F.linear(mixed[g], w) for g, w in zip(mix_of, weights))
