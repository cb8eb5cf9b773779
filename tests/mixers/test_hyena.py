"""Hyena's FFT long convolution against the explicit causal sum."""
import torch

from zoo.mixers.hyena import fft_causal_conv


def test_fft_conv_matches_explicit_sum():
    torch.manual_seed(0)
    B, L, D = 2, 11, 3
    u, h, bias = torch.randn(B, L, D, dtype=torch.float64), torch.randn(L, D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    want = torch.stack([sum(h[t - s] * u[:, s] for s in range(t + 1)) + bias * u[:, t] for t in range(L)], dim=1)
    torch.testing.assert_close(fft_causal_conv(u, h, bias).double(), want, rtol=1e-5, atol=1e-5)
