"""A projection's forward for tall, narrow 16-bit inputs on a GPU: a streaming Triton matmul with the bias added.

Why: the small models of the MQAR grid project x [M, K] with M = B * L in the tens of thousands and K = d_model of
64 to 256. Such a matmul reads x once and writes y once, and little else: it is bound by memory, not arithmetic.
cuBLAS's bias-epilogue kernel for softmax's qkv projection at the figure-2 cell ([65536, 128] x [128, 384] bf16 with
bias, one H100 80GB, in a CUDA graph) took 39.6 us, 1.7 TB/s, half the memory's speed. Here a fixed set of programs
each holds one [K, BLOCK_N] block of the weight (and of the bias) for the whole launch and walks blocks of BLOCK_M
rows of x, the loads of the next block in flight while the current one is multiplied and stored (``tl.range``'s
stages): the weight is read once a program, x once a column block (from L2 after the first), y written once.

``project(x, weight, bias)`` takes this kernel where it applies (``streams``: CUDA, x and weight of one 16-bit
dtype, K at most ``MAX_K``, N at most ``MAX_N``, at least ``MIN_ROWS`` rows) and ``F.linear`` (cuBLAS) elsewhere. Accumulation is
float32 and the bias is added in float32 before the one rounding to x's dtype, as cuBLAS's epilogue does; the
order of the products' sum is the kernel's, so values differ from cuBLAS's by a rounding of the output.

Shapes: x [..., K] (unit stride along K), weight [N, K], bias [N] or None -> y [..., N], contiguous, x's dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from zoo.kernels.backend import record
from zoo.kernels.layout import last_dim_contiguous, resident_programs

MAX_K = 256  # the whole reduction in one block: one weight tile a program, held for the launch
MAX_N = 1024  # wider outputs (the tied head's 8192 classes) are matmuls with arithmetic enough for cuBLAS
MIN_ROWS = 4096  # fewer rows: a launch of a few programs, which cuBLAS's kernels serve as well
SIXTEEN_BIT = (torch.bfloat16, torch.float16)


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


def launch(M: int, N: int, K: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, warps, stages) for x [M, K] @ [K, N]: column blocks of up to 128 and 64 to 128 rows, so the
    float32 accumulator takes at most 64 registers a thread."""
    block_n = min(128, max(16, triton.next_power_of_2(N)))
    block_k = max(16, triton.next_power_of_2(K))
    block_m = 128 if block_k <= 128 else 64
    return block_m, block_n, 8 if block_m * block_n >= 128 * 128 else 4, 3


def streams(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether x [..., K] @ weight [N, K]^T takes the Triton kernel (the module doc's conditions)."""
    N, K = weight.shape
    return (x.is_cuda and x.dtype in SIXTEEN_BIT and weight.dtype == x.dtype and K <= MAX_K and N <= MAX_N
            and x.numel() >= MIN_ROWS * K)


def project_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T + bias [N] (or None) by the Triton kernel, any device (the interpreter on a CPU);
    x, weight and bias of one dtype, K at most ``MAX_K``."""
    N, K = weight.shape
    if K > MAX_K:
        raise ValueError(f"project_triton: K={K} is not valid: expected at most {MAX_K}")
    x2 = last_dim_contiguous(x.reshape(-1, K))
    weight = last_dim_contiguous(weight)
    M = x2.shape[0]
    y = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M and N:
        block_m, block_n, warps, stages = launch(M, N, K)
        blocks_n = triton.cdiv(N, block_n)
        programs_m = max(1, min(triton.cdiv(M, block_m), resident_programs(x.device) // blocks_n))
        _project_kernel[(programs_m * blocks_n,)](
            x2, weight, y if bias is None else bias, y, M, N, K, x2.stride(0), weight.stride(0), blocks_n, programs_m,
            HAS_BIAS=bias is not None, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=max(16, triton.next_power_of_2(K)),
            STAGES=stages, num_warps=warps)
    return y.view(*x.shape[:-1], N)


def project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T + bias [N] (or None), inputs already in the matmul's dtype: the Triton kernel
    where ``streams`` says so, else ``F.linear``. ``last_backend("projection")`` says which ran."""
    if streams(x, weight):
        record("projection", "triton")
        return project_triton(x, weight, bias)
    record("projection", "cublas" if x.is_cuda else "torch")
    return F.linear(x, weight, bias)
