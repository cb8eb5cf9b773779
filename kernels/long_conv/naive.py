"""Plain PyTorch long causal convolution, summed directly (O(L^2) work): the reference of the FFT path."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def long_conv_naive(u: torch.Tensor, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``y[t] = sum_{s<=t} h[t-s] u[s] + bias * u[t]`` per channel, in float32 (float64 stays float64).

    u: (B, L, D); h: (L, D) filter taps; bias: (D,) -> (B, L, D) in u's dtype.
    """
    dtype = torch.promote_types(u.dtype, torch.float32)
    L, D = h.shape
    x = F.pad(u.to(dtype).transpose(1, 2), (L - 1, 0))  # (B, D, 2L - 1): zeros before the sequence
    # conv1d correlates, so the taps go in reversed: output t sums h[L-1-j] x[t+j] = h[t-s] u[s]
    y = F.conv1d(x, h.to(dtype).flip(0).T[:, None], groups=D).transpose(1, 2)
    return (y + u.to(dtype) * bias.to(dtype)).to(u.dtype)
