"""Which kernel writes a projection's forward: zoo's streaming Triton matmul (``streaming.py``) for tall, narrow
16-bit inputs on a GPU, cuBLAS's ``F.linear`` for everything else.

At K up to 128 a projection of M = B * L rows (tens of thousands in the MQAR grid) reads x once, writes y once and
does little arithmetic between: cuBLAS ran such matmuls at half the memory's speed on an H100, the streaming kernel at
up to twice its speed (``streaming.py``). At K=256 cuBLAS was as fast or faster, and for wide outputs (the tied head's
8192 classes) there is arithmetic enough for cuBLAS's tiles. No Triton import here: the layers that import this
module also run on machines without Triton.

Shapes: x [..., K], weight [N, K], bias [N] or None -> y [..., N] in x's dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.backend import record
from zoo.kernels.linear.grads import SIXTEEN_BIT

MAX_K = 128  # longer reductions: cuBLAS (as fast or faster at K=256 on an H100)
MAX_N = 1024  # wider outputs: cuBLAS
MIN_ROWS = 4096  # fewer rows: a launch of a few programs, which cuBLAS's kernels serve as well


def streams(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether x [..., K] @ weight [N, K]^T takes the streaming Triton kernel: CUDA, x and weight of one 16-bit dtype,
    K at most ``MAX_K``, N at most ``MAX_N``, at least ``MIN_ROWS`` rows."""
    N, K = weight.shape
    return (x.is_cuda and x.dtype in SIXTEEN_BIT and weight.dtype == x.dtype and K <= MAX_K and N <= MAX_N
            and x.numel() >= MIN_ROWS * K)


def project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T + bias [N] (or None), inputs already in the matmul's dtype: the Triton kernel
    where ``streams`` says so, else ``F.linear``. ``last_backend("projection")`` says which ran."""
    if streams(x, weight):
        from zoo.kernels.linear.streaming import project_triton
        record("projection", "triton")
        return project_triton(x, weight, bias)
    record("projection", "cublas" if x.is_cuda else "torch")
    return F.linear(x, weight, bias)
