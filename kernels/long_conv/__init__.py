"""Hyena's long causal convolution: a length-L filter per channel plus a per-channel skip.

``long_conv(u, h, bias, backend="auto")``: ``"fft"`` (``fft.py``, FFT with 2L zero padding),
``"naive"`` (``naive.py``, the direct causal sum) or ``"auto"``, which is the FFT on every device (as
Zoology computes it, so CPU and GPU runs take the same path). ``zoo.kernels.backend.last_backend("long_conv")``
says which ran.

``gated_long_conv(xbc, h, bias, backend="auto")``: Hyena's whole gated step, ``x2 * long_conv(x1 * v, h, bias)``
with ``x1, x2, v = xbc.chunk(3, -1)``. ``"triton"`` (``gated.py``: the gates fused into Triton kernels around the
FFTs, one autograd Function), ``"naive"`` (that composition of PyTorch ops around :func:`long_conv`) or ``"auto"``,
Triton for CUDA tensors. ``last_backend("gated_long_conv")`` says which ran. On an H200, bf16 autocast
(``python -m zoo.kernels.bench --gated-long-conv ...``), forward / forward + backward against the composition: 0.54 /
1.35 ms against 0.71 / 1.96 at B=256, L=256, D=128; 0.21 / 1.00 against 0.37 / 1.10 at B=128, L=512, D=64; 0.26 /
1.14 against 0.68 / 1.86 at B=256, L=512, D=64. Hyena's training step (``python -m zoo.bench.step``, B=256, N=256,
d_model=128, CUDA graphs) went from 6.37 to 4.26-4.29 ms, 2.65x to 1.77-1.81x softmax attention's.

Tried and left out: the convolution as D batched products with each channel's lower-triangular Toeplitz matrix on
tensor cores. On an H200 (bf16 input, forward + backward) it took 1.46 ms against the FFT's 1.73 ms at B=256,
L=256, D=128 and 1.35 against 1.27 ms at B=128, L=512, D=64: the copies into and out of [D, B, L] cost what the
FFT's float32 passes do, so it was not worth a second path.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, record, recorded_path
from zoo.kernels.long_conv.fft import fft_causal_conv
from zoo.kernels.long_conv.naive import long_conv_naive

BACKENDS = ("auto", "fft", NAIVE)
GATED_BACKENDS = ("auto", "triton", NAIVE)


def long_conv(u: torch.Tensor, h: torch.Tensor, bias: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """u: (B, L, D); h: (L, D) filter taps; bias: (D,) -> ``y[t] = sum_{s<=t} h[t-s] u[s] + bias * u[t]``,
    (B, L, D) in u's dtype."""
    check_backend(backend, BACKENDS)
    fft = backend != NAIVE
    record("long_conv", "fft" if fft else NAIVE)
    return fft_causal_conv(u, h, bias) if fft else long_conv_naive(u, h, bias)


def gated_long_conv(xbc: torch.Tensor, h: torch.Tensor, bias: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """xbc [B, L, 3D], the streams (x1, x2, v) side by side; h [L, D]; bias [D] -> ``x2 * long_conv(x1 * v, h, bias)``,
    [B, L, D] in xbc's dtype."""
    check_backend(backend, GATED_BACKENDS)
    fast = recorded_path("gated_long_conv", backend, "triton", "zoo.kernels.long_conv.gated", xbc,
                         "Hyena's gated long conv on GPU (falls back to the unfused FFT composition)")
    if fast is not None:
        return fast.gated_long_conv(xbc, h, bias)
    x1, x2, v = xbc.chunk(3, dim=-1)
    return x2 * long_conv(x1 * v, h, bias)


__all__ = ["long_conv", "gated_long_conv", "BACKENDS", "GATED_BACKENDS"]
