"""The last step of zoo's deterministic column sums: per-program partial sums, summed over the programs.

Several backward kernels (the biased projections' bias gradient in ``linear``, the norms' weight and bias
gradients in ``layer_norm``) have a fixed set of programs each add its run of rows into one row of a float32
partial [P, N]; summing the P rows finishes the gradient, with no atomics, so it is the same on every run.

Why a kernel for that sum: ``partial.sum(0)`` of a few hundred rows and up to a few hundred columns runs as
PyTorch's generic reduction, which took about 11 us each in softmax's step (8 of them a step, 0.034 s of an
epoch's 0.619 s of GPU time; one H100 80GB, MQAR N=256, d_model=128, batch 256, ``python -m zoo.bench.profile``).
Here each program owns a narrow block of columns (so that even N = 128 gives several programs) and adds the P
rows in tiles of up to ``TILE // BLOCK_N`` rows, a few loop steps for the P of a few hundred these kernels write,
in a fixed order. Meant for such P: a sum over thousands of rows would want its rows split between programs too.

Shapes: partial [..., P, N] float32 -> [..., N] float32.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

MAX_BLOCK_N = 16  # columns per program: 64-byte runs of a row, and 24 programs at N = 384, 8 per group at N = 128
TILE = 4096  # values a program adds per loop step: 16 per thread with 8 warps, so up to 256 rows a step
NUM_WARPS = 8


@triton.jit
def _sum_rows_kernel(PARTIAL, OUT, P, N, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    group = tl.program_id(1).to(tl.int64)
    acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    for start in range(0, P, ROWS):
        rows = start + tl.arange(0, ROWS)
        mask = (rows < P)[:, None] & col_ok[None, :]
        acc += tl.load(PARTIAL + (group * P + rows[:, None]) * N + cols[None, :], mask=mask, other=0.0)
    tl.store(OUT + group * N + cols, tl.sum(acc, axis=0), mask=col_ok)


def sum_rows(partial: torch.Tensor) -> torch.Tensor:
    """partial [..., P, N] float32 -> its sum over P, [..., N] float32, in a fixed order (a Triton kernel on any
    device it can run on: the GPU, or the CPU under ``TRITON_INTERPRET=1``)."""
    if partial.dtype != torch.float32:
        raise TypeError(f"sum_rows: partial sums are float32, got {partial.dtype}")
    *lead, P, N = partial.shape
    groups = math.prod(lead)
    out = torch.zeros(*lead, N, dtype=torch.float32, device=partial.device)
    if groups == 0 or P == 0 or N == 0:
        return out
    partial = partial.contiguous()
    block_n = min(triton.next_power_of_2(N), MAX_BLOCK_N)
    rows = min(max(1, TILE // block_n), triton.next_power_of_2(P))
    _sum_rows_kernel[(triton.cdiv(N, block_n), groups)](partial, out, P, N, ROWS=rows, BLOCK_N=block_n,
                                                         num_warps=NUM_WARPS)
    return out
