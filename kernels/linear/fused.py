"""A linear layer whose bias gradient is a deterministic Triton column sum.

Why: the bias gradient of a projection is its output gradient [M, N] summed over the M = B * L rows. In
softmax's training step (MQAR N=256, batch 256, d_model=128, bf16 autocast, one H100) PyTorch's sums over
the qkv and output projections' [65536, 384] and [65536, 128] bf16 gradients took 0.26 ms of the step's 2.2 ms
of GPU time, about 0.5 TB/s. Here a fixed set of programs (a few per SM) each add a contiguous run of rows of
one block of columns into float32 registers and store one row of a [programs, N] partial; a sum over programs
finishes it (``partial_sums.column_sum``). Rows go to programs in a fixed way and nothing is added atomically, so
the gradient is the same on every run. It is summed in float32 and rounded to the bias's dtype once (PyTorch rounds
the sum to the gradient's dtype, bf16 under autocast, before the cast to the float32 parameter).

Everything else is ``F.linear``'s: the forward (``forward.project``: for tall, narrow 16-bit inputs on a GPU a
streaming Triton matmul with the bias added, else ``F.linear``), the input and weight gradients as matmuls, all in
autocast's dtype when autocast is on (the inputs cast as autocast casts them), the input and weight gradients
returned in the dtypes of x and weight; the weight gradient of a float32 weight under 16-bit
autocast on a GPU comes out of its matmul in float32 (``grads.weight_grad``: no rounding, no cast kernel).

Shapes: x [..., K], weight [N, K], bias [N] or None -> y [..., N].
"""
from __future__ import annotations

import torch

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.backend import not_compiled
from zoo.kernels.linear.forward import project
from zoo.kernels.linear.grads import weight_grad
from zoo.kernels.partial_sums import column_sum


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, dtype):
        xc, wc = (x, weight) if dtype is None else (x.to(dtype), weight.to(dtype))
        bc = bias if bias is None or dtype is None else bias.to(dtype)
        ctx.save_for_backward(xc if ctx.needs_input_grad[1] else None, wc if ctx.needs_input_grad[0] else None)
        ctx.dtypes = x.dtype, weight.dtype, None if bias is None else bias.dtype
        return project(xc, wc, bc)

    @staticmethod
    def backward(ctx, dy):
        xc, wc = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        dy2 = dy.reshape(-1, dy.shape[-1])
        if dy2.stride(-1) != 1:
            dy2 = dy2.contiguous()
        dx = (dy @ wc).to(x_dtype) if ctx.needs_input_grad[0] else None
        dw = weight_grad(dy2, xc.reshape(-1, xc.shape[-1]), w_dtype) if ctx.needs_input_grad[1] else None
        db = column_sum(dy2).to(b_dtype) if b_dtype is not None and ctx.needs_input_grad[2] else None
        return dx, dw, db, None


# Opaque to torch.compile: Inductor has nothing to fuse into a hand-written kernel.
@not_compiled
def linear_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T + bias [N] (or None) -> [..., N]; under autocast (on x's device type) they are
    cast to its dtype first, as ``F.linear``'s are. The bias gradient is :func:`column_sum` of the output
    gradient."""
    return _Linear.apply(x, weight, bias, matmul_dtype(x))
