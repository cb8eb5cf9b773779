"""The long causal convolution by FFT: O(L log L) on every device, Hyena's (and Zoology's) way of computing it."""
from __future__ import annotations

import torch


def fft_causal_conv(u: torch.Tensor, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``y[t] = sum_{s<=t} h[t-s] u[s] + bias * u[t]`` per channel, by FFT in float32.

    u: (B, L, D); h: (L, D); bias: (D,) -> (B, L, D) in u's dtype.
    """
    L = u.shape[1]
    n = 2 * L  # zero padding to 2L turns the FFT's circular convolution into a causal linear one
    uf = torch.fft.rfft(u.float(), n=n, dim=1)
    hf = torch.fft.rfft(h.float(), n=n, dim=0)
    y = torch.fft.irfft(uf * hf, n=n, dim=1)[:, :L]
    return (y + u.float() * bias.float()).to(u.dtype)
