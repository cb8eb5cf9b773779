"""A bias-free projection used as several parts, one matmul per part, each part its own contiguous tensor.

Why: ``F.linear(x, w).split(sizes, -1)`` leaves every part a view with the whole output's row stride, and autograd
concatenates the parts' gradients into one [M, N] tensor before the matmul gradients. Mamba-2's in_proj (z; x, B,
C for the short conv; dt) is 772 columns wide at d_model=128: its conv input rows start 8-byte aligned at best, so
the conv's Triton loads cannot be 16-byte vectors, and the gradients' concatenation took 0.146 s of a 3.23 s epoch
of the figure-2 cell (H100 profile, ``results/SPEED.md``). Here each part is one matmul into its own [M, n] tensor;
backward, dx accumulates the parts' matmuls in place (``addmm_``) and each part's weight gradient is written into its
row block of one [N, K] tensor. Parts and weight gradients are the reference's bits; dx adds up the parts' products in
its matmul dtype (under bf16 autocast one rounding per part, as autograd sums the gradients of a tensor used twice),
where the reference rounds one product over all N columns.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.autocast import matmul_dtype


class _SplitLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, sizes, dtype):
        xc, wc = (x, weight) if dtype is None else (x.to(dtype), weight.to(dtype))
        ctx.save_for_backward(xc if ctx.needs_input_grad[1] else None, wc if ctx.needs_input_grad[0] else None)
        ctx.sizes, ctx.dtypes, ctx.x_shape = sizes, (x.dtype, weight.dtype), x.shape
        return tuple(F.linear(xc, w) for w in wc.split(sizes))

    @staticmethod
    def backward(ctx, *grads):
        xc, wc = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        grads = [g.reshape(-1, g.shape[-1]) for g in grads]
        dx = dw = None
        if ctx.needs_input_grad[0]:
            parts = wc.split(ctx.sizes)
            dx = grads[0] @ parts[0]
            for g, w in zip(grads[1:], parts[1:]):
                dx.addmm_(g, w)
            dx = dx.view(ctx.x_shape).to(x_dtype)
        if ctx.needs_input_grad[1]:
            x2 = xc.reshape(-1, xc.shape[-1])
            dw = torch.empty(sum(ctx.sizes), x2.shape[1], dtype=x2.dtype, device=x2.device)
            for g, rows in zip(grads, dw.split(ctx.sizes)):
                torch.mm(g.t(), x2, out=rows)
            dw = dw.to(w_dtype)
        return dx, dw, None, None


def split_linear(x: torch.Tensor, weight: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, ...]:
    """x [..., K] @ weight [N, K]^T split into parts of ``sizes`` columns (summing to N) -> a contiguous [..., n]
    tensor per part: ``F.linear(x, weight).split(sizes, -1)``'s values, dtypes as ``F.linear``'s (autocast too)."""
    if sum(sizes) != weight.shape[0]:
        raise ValueError(f"split_linear: sizes {list(sizes)} do not add up to the weight's {weight.shape[0]} rows")
    return _SplitLinear.apply(x, weight, tuple(sizes), matmul_dtype(x))
