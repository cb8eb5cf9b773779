"""A projection's forward for tall, narrow 16-bit inputs on a GPU: a streaming Triton matmul with the bias added.

Why: the small models of the MQAR grid project x [M, K] with M = B * L in the tens of thousands and K = d_model of
64 to 512. Such a matmul reads x once and writes y once, and little else: at K up to 128 it is bound by memory, not
arithmetic, and cuBLAS's kernels ran at half the memory's speed there. Here a fixed set of programs (2 an SM) each
holds one [K, BLOCK_N] block of the weight (and of the bias) for the whole launch and walks blocks of 64 rows of x,
the loads of the next blocks in flight while the current one is multiplied and stored (``tl.range``'s 3 stages):
the weight is read once a program, x once a column block (from L2 after the first), y written once.

Measured on an H100 80GB HBM3 (bf16, in a CUDA graph, us a call, cuBLAS's ``F.linear`` -> this kernel at its
launch): [65536, 128] x [128, 384] with bias (softmax's qkv at the figure-2 cell) 39.6 -> 28.3; x [128, 128] with bias
18.4 -> 8.9 to 9.5; x [128, 512] 36.0 -> 33.9; [65536, 64] x [64, 192] with bias 18.5 -> 10.3; [4096, 128] x [128,
384] 4.6 -> 3.6 to 4.0. At K=256 cuBLAS was as fast or faster ([65536, 256] x [256, 128] 19.4 against 19.8 at this
kernel's best launch, x [256, 768] 56.7 against 62.7), so K stays at most ``forward.MAX_K``. Block widths, warps,
stages and programs an SM were chosen from a sweep of 48 to 66 launches a shape (``results/SPEED.md``).

``forward.project`` takes this kernel where it applies (``forward.streams``) and ``F.linear`` (cuBLAS) elsewhere.
Accumulation is float32 and the bias is added in float32 before the one rounding to x's dtype, as cuBLAS's epilogue
does; the order of the products' sum is the kernel's, so values differ from cuBLAS's by a rounding of the output.

Shapes: x [..., K] (unit stride along K), weight [N, K], bias [N] or None -> y [..., N], contiguous, x's dtype.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.layout import last_dim_contiguous, resident_programs

# The whole reduction in one block: at K = 256 a program's weight tile and three stages of x blocks take 160 KB of
# shared memory, at 512 more than an H100 has. (Which K take this kernel is ``forward.MAX_K``'s choice, by speed.)
LARGEST_K = 256

BLOCK_M = 64
PROGRAMS_PER_SM = 2  # each holds three stages of x blocks and its weight tile: 80 KB of shared memory at K=128


@triton.jit
def _project_kernel(X, W, BIAS, Y, M, N, K, s_xm, s_wn, blocks_n, programs_m, HAS_BIAS: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr):
    # program (i, j) = (pid // blocks_n, pid % blocks_n): column block j, row blocks i, i + programs_m, ...
    pid = tl.program_id(0)
    cols = (pid % blocks_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ks = tl.arange(0, BLOCK_K)
    k_ok = ks < K
    w = tl.load(W + cols[None, :] * s_wn + ks[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)  # [K, N]^T
    if HAS_BIAS:
        b = tl.load(BIAS + cols, mask=col_ok, other=0.0).to(tl.float32)
    blocks_m = tl.cdiv(M, BLOCK_M)
    for block in tl.range(pid // blocks_n, blocks_m, programs_m, num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)  # 64-bit offsets past 2**31 elements
        row_ok = rows < M
        x = tl.load(X + rows[:, None] * s_xm + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        acc = tl.dot(x, w)
        if HAS_BIAS:
            acc += b[None, :]
        tl.store(Y + rows[:, None] * N + cols[None, :], acc.to(Y.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])


def launch(N: int) -> tuple[int, int, int]:
    """(BLOCK_N, warps, stages) of an output N wide, rows in blocks of ``BLOCK_M``; measured on an H100 80GB (module
    doc)."""
    return (64, 4, 3) if N <= 192 else (128, 8, 3)


def project_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T + bias [N] (or None) by the Triton kernel, any device (the interpreter on a CPU);
    x, weight and bias of one dtype, K at most ``LARGEST_K``."""
    N, K = weight.shape
    if K > LARGEST_K:
        raise ValueError(f"project_triton: K={K} is not valid: expected at most {LARGEST_K}")
    x2 = last_dim_contiguous(x.reshape(-1, K))
    weight = last_dim_contiguous(weight)
    M = x2.shape[0]
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M and N:
        block_n, warps, stages = launch(N)
        blocks_n = triton.cdiv(N, block_n)
        programs_m = max(1, min(triton.cdiv(M, BLOCK_M), resident_programs(x.device, PROGRAMS_PER_SM) // blocks_n))
        _project_kernel[(programs_m * blocks_n,)](
            x2, weight, y if bias is None else bias, y, M, N, K, x2.stride(0), weight.stride(0), blocks_n, programs_m,
            HAS_BIAS=bias is not None, BLOCK_M=BLOCK_M, BLOCK_N=block_n, BLOCK_K=max(16, triton.next_power_of_2(K)),
            STAGES=stages, num_warps=warps)
    return y.view(*x.shape[:-1], N)
