"""A linear layer's weight gradient under autocast, in the weight's dtype straight from the matmul.

Why: under bf16 autocast PyTorch computes dL/dW = g^T x as a bf16 matmul (rounding the float32 sum to bf16), and
autocast's cast of the float32 weight then casts that gradient back to float32 in a kernel of its own: one cast a
weight a step, which in the small models of the MQAR grid is a kernel launch among a few hundred (softmax's step
at N=512, d_model=64 held 7 such casts per model on an H200). cuBLAS can write the float32 sum itself
(``torch.mm(..., out_dtype=torch.float32)``): no rounding to bf16, no cast kernel.

Shapes: g [M, N] (the output gradient), x [M, K] (the input as the forward's matmul read it) -> [N, K].
"""
from __future__ import annotations

import torch

SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def matmul_in(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """a @ b in ``dtype``: written by cuBLAS in float32 where a and b are 16-bit CUDA tensors and ``dtype`` is
    float32 (``out_dtype``, which only CUDA has), else the matmul in a's dtype, cast."""
    if a.is_cuda and dtype == torch.float32 and a.dtype in SIXTEEN_BIT and b.dtype == a.dtype:
        return torch.mm(a, b, out_dtype=torch.float32)
    return (a @ b).to(dtype)


def weight_grad(g: torch.Tensor, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """g^T x in ``dtype`` (:func:`matmul_in`)."""
    return matmul_in(g.t(), x, dtype)
