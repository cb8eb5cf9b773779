"""The tied head's matmul, then the loss and the logits' gradient in one Triton kernel over the logits.

Why: at MQAR's figure-2 cell (4096 labelled rows, 8192 classes, bf16) the logits are 64 MB. The loss alone
(``zoo.kernels.cross_entropy``) cannot write their gradient in the forward: the gradient must be scaled by the
loss's incoming gradient g, known only in the backward, and that scaling was a third pass over the logits
(``results/SPEED.md``, "The training loss and the bias gradients"). With the head's matmul in the same op it need
not be: the gradient of x and of the weight are ``(G @ W) g`` and ``(G^T x) g``, so g scales the matmuls' small
outputs ([R, D] and [V, D]) and the logits' gradient G = (softmax - onehot) / n is written while the loss is
computed, over the logits themselves. The logits are then read from memory once and written once (the loss alone,
with its gradient in the backward, read them twice).

The kernel holds a row of up to ``ONE_PASS_MAX`` classes in registers (one read); a longer row is read twice, the
second time block by block right after the first, mostly from L2. At 4096 x 8192 bf16 logits (one H100 80GB, in a
CUDA graph) reading each row twice in blocks of 4096 with 8 warps (the default) took 56.5 us a call; the row of 8192
in registers took 62.4 us with 16 warps, 73.4 and 69.3 with 8 and 4; the loss alone's two kernels
(``zoo.kernels.cross_entropy``), 80.0 us. In softmax's training step (``python -m zoo.bench.profile``, same GPU)
the default took 54 us a step; holding the row in registers, 61 (an earlier tree, another call). The math is float32
throughout; G is rounded to the logits' dtype once. Backward, both matmuls write float32 (cuBLAS's ``out_dtype`` for
16-bit CUDA inputs), g scales them there, and x's gradient is rounded to x's dtype once: with g = 1 the numbers of
the head through ``zoo.kernels.linear`` and ``zoo.kernels.cross_entropy``, up to the order of the log-sum-exp's sum
(a few entries of G round to the neighbouring bf16 value) and cuBLAS's choice of kernel.

Shapes: x [R, D], weight [V, D], targets [R] int64 -> a float32 0-d loss; n = the number of labelled rows, read
from device memory (nothing waits for the host: CUDA graphs).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.backend import not_compiled
from zoo.kernels.cross_entropy.fused import MAX_BLOCK, row_log_sum_exp
from zoo.kernels.linear.grads import matmul_in, weight_grad

ONE_PASS_MAX = MAX_BLOCK  # classes a row may have to be held in registers (longer rows: two reads, faster there)


@triton.jit
def _loss_and_grad_kernel(LOGITS, TARGETS, LOSS, INV_N, V, s_row, ignore_index, WRITE_GRAD: tl.constexpr,
                          ONE_PASS: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(TARGETS + row)
    labelled = target != ignore_index
    base = LOGITS + row * s_row
    if ONE_PASS:  # the whole row in registers: read once, overwritten by its gradient
        cols = tl.arange(0, BLOCK_V)
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m = tl.max(x, axis=0)
        lse = m + tl.log(tl.sum(tl.exp(x - m), axis=0))
        picked = tl.sum(tl.where(cols == target, x, 0.0), axis=0)
    else:
        lse, picked = row_log_sum_exp(base, target, V, BLOCK_V)
    tl.store(LOSS + row, tl.where(labelled, lse - picked, 0.0))
    if WRITE_GRAD:  # (softmax - onehot) / n; an unlabelled row gets none
        scale = tl.where(labelled, tl.load(INV_N), 0.0)
        if ONE_PASS:
            g = (tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)) * scale
            tl.store(base + cols, g.to(LOGITS.dtype.element_ty), mask=cols < V)
        else:
            for start in range(0, V, BLOCK_V):
                cols = start + tl.arange(0, BLOCK_V)
                x = tl.load(base + cols, mask=cols < V, other=0.0).to(tl.float32)
                g = (tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)) * scale
                tl.store(base + cols, g.to(LOGITS.dtype.element_ty), mask=cols < V)


def _launch(V: int) -> dict:
    whole = triton.next_power_of_2(V)
    if whole <= ONE_PASS_MAX:
        return dict(ONE_PASS=True, BLOCK_V=whole, num_warps=8 if whole >= 2048 else 4)
    return dict(ONE_PASS=False, BLOCK_V=MAX_BLOCK, num_warps=8)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, targets, ignore_index, dtype):
        xc, wc = (x, weight) if dtype is None else (x.to(dtype), weight.to(dtype))
        logits = xc @ wc.t()  # [R, V], contiguous: the kernel writes G over it
        R, V = logits.shape
        inv_n = 1.0 / (targets != ignore_index).sum().float()  # inf without labels: the loss is NaN, as PyTorch's
        loss_rows = torch.empty(R, device=x.device, dtype=torch.float32)
        write_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        if R:
            _loss_and_grad_kernel[(R,)](logits, targets, loss_rows, inv_n, V, logits.stride(0), ignore_index,
                                        WRITE_GRAD=write_grad, **_launch(V))
        if write_grad:
            ctx.save_for_backward(logits, xc if ctx.needs_input_grad[1] else None,
                                  wc if ctx.needs_input_grad[0] else None)
            ctx.dtypes = x.dtype, weight.dtype
        return loss_rows.sum() * inv_n

    @staticmethod
    def backward(ctx, grad_loss):
        G, xc, wc = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        g = grad_loss.float()
        dx = (matmul_in(G, wc, torch.float32) * g).to(x_dtype) if ctx.needs_input_grad[0] else None
        dw = weight_grad(G, xc, w_dtype).mul_(g) if ctx.needs_input_grad[1] else None
        return dx, dw, None, None, None


# Opaque to torch.compile: Inductor has nothing to fuse into a hand-written kernel.
@not_compiled
def linear_cross_entropy_triton(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy of x [R, D] @ weight [V, D]^T over the labelled rows (targets [R] int64) -> a float32
    0-d tensor; under autocast the matmul in its dtype, as ``F.linear``'s."""
    return _LinearCrossEntropy.apply(x, weight, targets, ignore_index, matmul_dtype(x))
