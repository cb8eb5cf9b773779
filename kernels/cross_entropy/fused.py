"""Cross-entropy over the vocabulary: a Triton log-sum-exp pass forward, one gradient pass backward.

Why: the training loss of every zoo run is a cross-entropy over the vocabulary at the labelled positions
(MQAR at N=256, batch 256: 4096 rows x 8192 classes). In PyTorch that is a float32 copy of the bf16
logits, log-softmax, its backward into a float32 gradient and a cast back to bf16: about 1.3 GB of memory
traffic a step, where the logits themselves are 64 MB. Here the forward reads each row of logits once (an
online max and sum of exponentials) and keeps its log-sum-exp; the backward reads the row again and writes
the gradient ``(softmax - onehot) * g / n`` in the logits' dtype, g the incoming gradient (read from device
memory). So the logits are read twice and the gradient written once: about 0.2 GB a step. (Writing the
gradient during the forward, as fused losses that free their logits do, costs a third pass: scaling it by g
afterwards.) The arithmetic is float32 throughout, as in the reference, and the gradient is rounded to the
logits' dtype once, where the reference rounds it in the cast back.

Shapes: logits [R, V] (any row stride, contiguous rows), targets [R] int64; n = the number of rows whose
target is not ``ignore_index``, read from device memory, so nothing waits for the host (CUDA graphs).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_BLOCK = 4096  # classes per loop step: 16 per thread with 8 warps


@triton.jit
def row_log_sum_exp(base, target, V, BLOCK_V: tl.constexpr):
    """(log-sum-exp, the logit at column ``target``) of the row of V logits at ``base``, in float32, online over
    blocks of classes (the first block holds a class, so the running max is finite after it). A target outside
    [0, V) (an unlabelled row) gives 0 for its logit."""
    m = float("-inf")
    total = 0.0
    picked = 0.0
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        total = total * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
        picked += tl.sum(tl.where(cols == target, x, 0.0), axis=0)
    return m + tl.log(total), picked


@triton.jit
def _cross_entropy_fwd_kernel(LOGITS, TARGETS, LOSS, LSE, V, s_row, ignore_index, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(TARGETS + row)
    lse, picked = row_log_sum_exp(LOGITS + row * s_row, target, V, BLOCK_V)
    tl.store(LOSS + row, tl.where(target != ignore_index, lse - picked, 0.0))
    tl.store(LSE + row, lse)


@triton.jit
def _cross_entropy_bwd_kernel(LOGITS, TARGETS, LSE, INV_N, GRAD_LOSS, GRAD, V, s_row, g_row, ignore_index,
                              BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(TARGETS + row)
    # g / n for a labelled row; an unlabelled row gets no gradient
    scale = tl.where(target != ignore_index, tl.load(INV_N) * tl.load(GRAD_LOSS).to(tl.float32), 0.0)
    lse = tl.load(LSE + row)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(LOGITS + row * s_row + cols, mask=cols < V, other=0.0).to(tl.float32)
        g = (tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)) * scale
        tl.store(GRAD + row * g_row + cols, g.to(GRAD.dtype.element_ty), mask=cols < V)


def _launch(V: int) -> dict:
    block = min(triton.next_power_of_2(V), MAX_BLOCK)
    return dict(BLOCK_V=block, num_warps=8 if block >= 2048 else 4)


class CrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of logits [R, V] over the labelled rows."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
        if logits.stride(-1) != 1:
            logits = logits.contiguous()
        R, V = logits.shape
        inv_n = 1.0 / (targets != ignore_index).sum().float()  # inf without labels: the loss is NaN, as PyTorch's
        loss_rows = torch.empty(R, device=logits.device, dtype=torch.float32)
        lse = torch.empty(R, device=logits.device, dtype=torch.float32)
        if R:
            _cross_entropy_fwd_kernel[(R,)](logits, targets, loss_rows, lse, V, logits.stride(0), ignore_index,
                                            **_launch(V))
        ctx.save_for_backward(logits, targets, lse, inv_n)
        ctx.ignore_index = ignore_index
        return loss_rows.sum() * inv_n

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        logits, targets, lse, inv_n = ctx.saved_tensors
        R, V = logits.shape
        grad = torch.empty((R, V), device=logits.device, dtype=logits.dtype)
        if R:
            _cross_entropy_bwd_kernel[(R,)](logits, targets, lse, inv_n, grad_loss.contiguous(), grad, V,
                                            logits.stride(0), V, ctx.ignore_index, **_launch(V))
        return grad, None, None


def cross_entropy_triton(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy over the labelled rows of logits [R, V] (targets [R] int64) -> a float32 0-d tensor."""
    return CrossEntropy.apply(logits, targets, ignore_index)
