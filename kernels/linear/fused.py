"""A linear layer whose bias gradient is a deterministic Triton column sum.

Why: the bias gradient of a projection is its output gradient [M, N] summed over the M = B * L rows. In
softmax's training step (MQAR N=256, batch 256, d_model=128, bf16 autocast, one H100) PyTorch's sums over
the qkv and output projections' [65536, 384] and [65536, 128] bf16 gradients took 0.26 ms of the step's 2.2 ms
of GPU time, about 0.5 TB/s. Here a fixed set of programs (a few per SM) each add a contiguous run of rows of
one block of columns into float32 registers and store one row of a [programs, N] partial; a sum over programs
finishes it. Rows go to programs in a fixed way and nothing is added atomically, so the gradient is the same on
every run. It is summed in float32 and rounded to the bias's dtype once (PyTorch rounds the sum to the
gradient's dtype, bf16 under autocast, before the cast to the float32 parameter).

Everything else is ``F.linear``'s: the forward with cuBLAS's bias epilogue, the input and weight gradients as
matmuls, all in autocast's dtype when autocast is on (the inputs cast as autocast casts them), the input and
weight gradients returned in the dtypes of x and weight; the weight gradient of a float32 weight under 16-bit
autocast on a GPU comes out of its matmul in float32 (``grads.weight_grad``: no rounding, no cast kernel).

Shapes: x [..., K], weight [N, K], bias [N] or None -> y [..., N].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.backend import not_compiled
from zoo.kernels.layout import resident_programs
from zoo.kernels.linear.grads import weight_grad
from zoo.kernels.partial_sums import sum_rows

TILE = 4096  # values per program and loop step: 16 per thread with 8 warps
MAX_BLOCK_N = 128  # columns per program: a row of bf16 gradient is then one 256-byte read
NUM_WARPS = 8


@triton.jit
def _bias_grad_column_sum_kernel(X, PARTIAL, M, N, s_row, rows_per_program,
                                 ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    first = tl.program_id(0).to(tl.int64) * rows_per_program
    acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)  # ROWS independent sums per column: loads stay in flight
    for start in range(0, rows_per_program, ROWS):
        rows = first + start + tl.arange(0, ROWS)
        mask = (rows < M)[:, None] & col_ok[None, :]
        acc += tl.load(X + rows[:, None] * s_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(PARTIAL + tl.program_id(0) * N + cols, tl.sum(acc, axis=0), mask=col_ok)


def column_sum(x: torch.Tensor) -> torch.Tensor:
    """x [M, N] (unit column stride) summed over its rows -> float32 [N], in a fixed order (float64 x: PyTorch's
    float64 sum, which the float32 kernel would round)."""
    if x.dtype == torch.float64:
        return x.sum(0)
    M, N = x.shape
    if M == 0:
        return torch.zeros(N, dtype=torch.float32, device=x.device)
    block_n = min(triton.next_power_of_2(N), MAX_BLOCK_N)
    rows = max(1, TILE // block_n)
    column_blocks = triton.cdiv(N, block_n)
    programs = max(1, min(triton.cdiv(M, rows), resident_programs(x.device) // column_blocks))
    per_program = triton.cdiv(triton.cdiv(M, programs), rows) * rows
    programs = triton.cdiv(M, per_program)  # none left without rows: every partial row is written
    partial = torch.empty(programs, N, dtype=torch.float32, device=x.device)
    _bias_grad_column_sum_kernel[(programs, column_blocks)](x, partial, M, N, x.stride(0), per_program,
                                                            ROWS=rows, BLOCK_N=block_n, num_warps=NUM_WARPS)
    return sum_rows(partial)


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, dtype):
        xc, wc = (x, weight) if dtype is None else (x.to(dtype), weight.to(dtype))
        bc = bias if bias is None or dtype is None else bias.to(dtype)
        ctx.save_for_backward(xc if ctx.needs_input_grad[1] else None, wc if ctx.needs_input_grad[0] else None)
        ctx.dtypes = x.dtype, weight.dtype, None if bias is None else bias.dtype
        return F.linear(xc, wc, bc)

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
