"""The last step of zoo's deterministic column sums: per-program partial sums, summed over the programs.

Several backward kernels (the bias gradient of ``linear``, the weight and bias gradients of ``layer_norm``, the
filter gradient of ``short_conv``, the mixes' of ``token_shift``, WKV-4's w and u, the selective scan's A, D and dt
bias) have each program (or sequence) add its share into one row of a float32 partial [P, N]; summing the P rows
finishes the gradient, with no atomics, so it is the same on every run.

Why a kernel for that sum: ``partial.sum(0)`` of a few hundred rows runs as PyTorch's generic reduction, a few
microseconds each, several times a step. Here each program owns a narrow block of columns (so that even N = 128 gives
several programs) and adds the P rows in tiles of up to ``TILE // BLOCK_N`` rows, in a fixed order: a few loop steps
for the P of a few hundred these kernels write. Measured on one H100 80GB (torch 2.11, Triton 3.6), 200 calls
captured in one CUDA graph (as ``python -m zoo.kernels.bench --sum-rows`` times them), us per call, PyTorch's sum
against this one: [176, 384] (softmax's qkv bias partials) 3.92 / 2.62, [176, 128] 4.03 / 2.91, [2, 528, 128] (a
norm's weight and bias partials) 8.54 / 4.10, [2, 132, 128] 3.76 / 2.90, [1024, 1536] (the short conv's) 7.96 / 5.58.
For softmax's step at the figure-2 cell (4 bias sums and 3 norm sums) that is about 18 us of its 1.6 ms. (Those
times include a fill of the output that the kernel no longer needs: it writes every entry.) This kernel as it is, on
one H200 (the bench's section): [176, 384] 3.90 / 1.73, [2, 528, 128] 8.53 / 3.02, [1024, 1536] 7.69 / 4.47; softmax's
profiled GPU time an epoch went from 0.528 to 0.509 s with it (``results/SPEED.md``).

Shapes: ``sum_rows``: partial [..., P, N] float32 -> [..., N] float32; ``sum_first``: [P, ...] -> [...].

``column_sum`` makes such partials itself, for a tall tensor x [M, N] summed over its rows (a projection's bias
gradient, the learned positions' gradient summed over the batch): a fixed set of programs (``column_walk``: a few
per SM) each add a contiguous run of rows of one block of columns in float32 and store one row of the partial;
``sum_rows`` finishes it. ``zoo.kernels.linear.fused`` says why (PyTorch's sums ran far below memory speed there);
``zoo.kernels.linear.packed`` walks its gradients the same way.

``sum_blocks`` is the other kind of partial: a recurrence's per-step gradients written by each of a few blocks of
channels (the selective scan's dB and dC, RWKV-7's value blocks, the SSD's blocks of P), [G, ...] with G of 1 to a
few and millions of values behind it. Its kernel writes the sum in the gradient's final dtype (the input's, bf16
under autocast): PyTorch's ``sum(0)`` wrote float32, and autograd's cast to the input's dtype then read it again.
Forward + backward in ms, one process on an H100 80GB, best of three interleaved rounds of ``do_bench``, bf16 inputs,
``sum(0)`` and the cast against this kernel: RWKV-7's recurrence (five gradients of four value blocks) 3.025 -> 2.902
at B=256, L=256, H=2, K=V=64, 3.029 -> 2.905 at B=128, L=512, H=2, 5.769 -> 5.542 at B=512, L=128, H=4; the selective
scan (dB, dC of 4 to 16 channel blocks) 0.977 -> 0.966 at Bt=256, L=256, E=256, N=16, 3.628 -> 3.618 at Bt=128,
L=512, E=1024. In RWKV-7's profiled epoch at the figure-2 cell its 10 calls a step take 0.216 s of 3.561 s of GPU
time: at about 55 us a call for 151 MB read and written, it runs at the H100's memory bandwidth.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from zoo.kernels.layout import resident_programs

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
    if groups == 0 or P == 0 or N == 0:
        return torch.zeros(*lead, N, dtype=torch.float32, device=partial.device)
    out = torch.empty(*lead, N, dtype=torch.float32, device=partial.device)  # every entry is written: no fill
    partial = partial.contiguous()
    block_n = min(triton.next_power_of_2(N), MAX_BLOCK_N)
    rows = min(max(1, TILE // block_n), triton.next_power_of_2(P))
    _sum_rows_kernel[(triton.cdiv(N, block_n), groups)](partial, out, P, N, ROWS=rows, BLOCK_N=block_n,
                                                         num_warps=NUM_WARPS)
    return out


def sum_first(partial: torch.Tensor) -> torch.Tensor:
    """partial [P, ...] float32 -> its sum over the first dim, [...] float32: ``sum_rows`` of the [P, rest] view."""
    return sum_rows(partial.reshape(partial.shape[0], -1)).view(partial.shape[1:])


COLUMN_BLOCK_N = 128  # columns a column-sum program adds: a row of bf16 gradient is then one 256-byte read


def column_walk(M: int, N: int, device: torch.device) -> tuple[int, int, int, int, int]:
    """The launch of a column sum over M rows of N columns: (programs, column blocks, rows a program walks, ROWS
    rows a loop step, BLOCK_N columns a program). Rows go to programs in a fixed way, and every program gets some,
    so every row of the [programs, N] partial is written."""
    block_n = min(triton.next_power_of_2(N), COLUMN_BLOCK_N)
    rows = max(1, TILE // block_n)
    column_blocks = triton.cdiv(N, block_n)
    programs = max(1, min(triton.cdiv(M, rows), resident_programs(device) // column_blocks))
    per_program = triton.cdiv(triton.cdiv(M, programs), rows) * rows
    return triton.cdiv(M, per_program), column_blocks, per_program, rows, block_n


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
    programs, column_blocks, per_program, rows, block_n = column_walk(M, N, x.device)
    partial = torch.empty(programs, N, dtype=torch.float32, device=x.device)
    _bias_grad_column_sum_kernel[(programs, column_blocks)](x, partial, M, N, x.stride(0), per_program,
                                                            ROWS=rows, BLOCK_N=block_n, num_warps=NUM_WARPS)
    return sum_rows(partial)


@triton.jit
def _sum_blocks_kernel(PARTIAL, OUT, G, M, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = i < M
    acc = tl.load(PARTIAL + i, mask=ok, other=0.0).to(tl.float32)
    for _ in range(1, G):
        PARTIAL += M  # the next block: a pointer step of M each time, never an int32 product g * M that could overflow
        acc += tl.load(PARTIAL + i, mask=ok, other=0.0).to(tl.float32)
    tl.store(OUT + i, acc.to(OUT.dtype.element_ty), mask=ok)


SUM_BLOCKS_BLOCK = 2048  # values a program sums: 16 a thread at 4 warps


def sum_blocks(partial: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """partial [G, ...] -> its sum over the first dim, [...] in ``dtype`` (default: partial's), blocks added in order
    in float32 (``sum_first``'s kernel is made for many rows of few columns, not a few rows of millions). Where G = 1
    the one block itself (a view, no copy), cast if ``dtype`` asks for another."""
    dtype = dtype or partial.dtype
    if partial.shape[0] == 1:
        return partial[0].to(dtype)
    G, *rest = partial.shape
    out = torch.empty(rest, dtype=dtype, device=partial.device)
    M = out.numel()
    if M:
        _sum_blocks_kernel[(triton.cdiv(M, SUM_BLOCKS_BLOCK),)](partial.contiguous(), out, G, M, BLOCK=SUM_BLOCKS_BLOCK,
                                                               num_warps=4)
    return out
