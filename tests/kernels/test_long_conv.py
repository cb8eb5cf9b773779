"""Hyena's long convolution: the direct reference and the FFT path against the explicit causal sum."""
import pytest
import torch

from zoo.kernels.long_conv.fft import fft_causal_conv
from zoo.kernels.long_conv.naive import long_conv_naive


@pytest.mark.parametrize("conv", [fft_causal_conv, long_conv_naive])
def test_matches_explicit_sum(conv):
    torch.manual_seed(0)
    B, L, D = 2, 11, 3
    u, h, bias = torch.randn(B, L, D, dtype=torch.float64), torch.randn(L, D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    want = torch.stack([sum(h[t - s] * u[:, s] for s in range(t + 1)) + bias * u[:, t] for t in range(L)], dim=1)
    torch.testing.assert_close(conv(u, h, bias).double(), want, rtol=1e-5, atol=1e-5)


def test_fft_matches_reference_in_float32():
    torch.manual_seed(0)
    u, h, bias = torch.randn(2, 64, 5), torch.randn(64, 5) * 0.1, torch.randn(5)
    torch.testing.assert_close(fft_causal_conv(u, h, bias), long_conv_naive(u, h, bias), rtol=1e-4, atol=1e-4)
