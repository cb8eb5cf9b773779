"""Cross-entropy and its gradient in one Triton pass over the logits.

Why: the training loss of every zoo run is a cross-entropy over the vocabulary at the labelled positions
(MQAR at N=256, batch 256: 4096 rows x 8192 classes). In PyTorch that is a float32 copy of the bf16
logits, log-softmax, its backward into a float32 gradient and a cast back to bf16: about 1.3 GB of memory
traffic a step, where the logits themselves are 64 MB. Here one program per row reads its bf16 logits twice
(an online max and sum of exponentials, then the gradient) and writes the loss of the row and the gradient
``(softmax - onehot) / n`` in the logits' dtype during the forward; the backward only scales it by the
incoming gradient. The arithmetic is float32 throughout, as in the reference, and the gradient is rounded
to the logits' dtype once, where the reference rounds it in the cast back.

Shapes: logits [R, V] (any row stride, contiguous rows), targets [R] int64; n = the number of rows whose
target is not ``ignore_index``, read from device memory, so nothing waits for the host (CUDA graphs).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_BLOCK = 4096  # classes per loop step: 16 per thread with 8 warps


@triton.jit
def _cross_entropy_kernel(LOGITS, TARGETS, INV_N, LOSS, GRAD, V, s_row, g_row, ignore_index,
                          WRITE_GRAD: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(TARGETS + row)
    labelled = target != ignore_index
    base = LOGITS + row * s_row
    # log-sum-exp of the row, online over blocks of classes (the first block holds a class, so m is finite after it)
    m = float("-inf")
    total = 0.0
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        total = total * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    lse = m + tl.log(total)
    picked = tl.load(base + tl.where(labelled, target, 0)).to(tl.float32)
    tl.store(LOSS + row, tl.where(labelled, lse - picked, 0.0))
    if WRITE_GRAD:
        scale = tl.where(labelled, tl.load(INV_N), 0.0)  # 1 / n; unlabelled rows get no gradient
        for start in range(0, V, BLOCK_V):
            cols = start + tl.arange(0, BLOCK_V)
            x = tl.load(base + cols, mask=cols < V, other=0.0).to(tl.float32)
            g = (tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)) * scale
            tl.store(GRAD + row * g_row + cols, g.to(GRAD.dtype.element_ty), mask=cols < V)


class CrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of logits [R, V] over the labelled rows; the gradient is computed in the forward."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
        if logits.stride(-1) != 1:
            logits = logits.contiguous()
        R, V = logits.shape
        inv_n = 1.0 / (targets != ignore_index).sum().float()  # inf without labels: the loss is NaN, as PyTorch's
        loss_rows = torch.empty(R, device=logits.device, dtype=torch.float32)
        write_grad = ctx.needs_input_grad[0]
        grad = torch.empty((R, V), device=logits.device, dtype=logits.dtype) if write_grad else loss_rows
        block = min(triton.next_power_of_2(V), MAX_BLOCK)
        if R:
            _cross_entropy_kernel[(R,)](logits, targets, inv_n, loss_rows, grad, V, logits.stride(0), V, ignore_index,
                                        WRITE_GRAD=write_grad, BLOCK_V=block, num_warps=8 if block >= 2048 else 4)
        if write_grad:
            ctx.save_for_backward(grad)
        return loss_rows.sum() * inv_n

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss.to(grad.dtype), None, None


def cross_entropy_triton(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy over the labelled rows of logits [R, V] (targets [R] int64) -> a float32 0-d tensor."""
    return CrossEntropy.apply(logits, targets, ignore_index)
