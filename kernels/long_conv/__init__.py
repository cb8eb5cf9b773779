"""Hyena's long causal convolution: a length-L filter per channel plus a per-channel skip.

``long_conv(u, h, bias, backend="auto")``: ``"fft"`` (``fft.py``, FFT in float32 with 2L zero padding,
O(L log L)), ``"toeplitz"`` (``toeplitz.py``, per channel a [B, L] x [L, L] product with the lower-triangular
Toeplitz matrix of the taps, O(L^2) on tensor cores in bf16/fp16, hand-written deterministic backward),
``"naive"`` (``naive.py``, the direct causal sum) or ``"auto"``, which is the FFT on every device for now (as
Zoology computes it, so CPU and GPU runs take the same path): :func:`auto_backend` decides, and
``AUTO_TOEPLITZ_MAX_LEN`` is the sequence length up to which it would take the Toeplitz product on CUDA (0:
never). ``zoo.kernels.backend.last_backend("long_conv")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, record
from zoo.kernels.long_conv.fft import fft_causal_conv
from zoo.kernels.long_conv.naive import long_conv_naive
from zoo.kernels.long_conv.toeplitz import toeplitz_causal_conv

FFT, TOEPLITZ = "fft", "toeplitz"
BACKENDS = ("auto", FFT, TOEPLITZ, NAIVE)
PATHS = {FFT: fft_causal_conv, TOEPLITZ: toeplitz_causal_conv, NAIVE: long_conv_naive}

# "auto" takes the Toeplitz product for CUDA inputs with L <= this, the FFT otherwise; 0 keeps the FFT everywhere.
AUTO_TOEPLITZ_MAX_LEN = 0


def auto_backend(u: torch.Tensor) -> str:
    """``"auto"``'s choice for u (B, L, D)."""
    return TOEPLITZ if u.is_cuda and u.shape[1] <= AUTO_TOEPLITZ_MAX_LEN else FFT


def long_conv(u: torch.Tensor, h: torch.Tensor, bias: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """u: (B, L, D); h: (L, D) filter taps; bias: (D,) -> ``y[t] = sum_{s<=t} h[t-s] u[s] + bias * u[t]``,
    (B, L, D) in u's dtype."""
    check_backend(backend, BACKENDS)
    chosen = auto_backend(u) if backend == "auto" else backend
    record("long_conv", chosen)
    return PATHS[chosen](u, h, bias)


__all__ = ["long_conv", "BACKENDS", "AUTO_TOEPLITZ_MAX_LEN", "auto_backend"]
