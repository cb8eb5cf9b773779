"""Triton helpers for functions whose textbook forms overflow: computed from e = exp(-|x|), which is in (0, 1]."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def sigmoid_of(x, e):
    """sigmoid(x) given e = exp(-|x|): no overflow for large |x|."""
    return tl.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@triton.jit
def sigmoid(x):
    return sigmoid_of(x, tl.exp(-tl.abs(x)))
