"""Projections of one input as several parts, one matmul per part, each part its own contiguous tensor.

Why: ``F.linear(x, w).split(sizes, -1)`` leaves every part a view with the whole output's row stride, and autograd
concatenates the parts' gradients into one [M, N] tensor before the matmul gradients. Mamba-2's in_proj (z; x, B,
C for the short conv; dt) is 772 columns wide at d_model=128: its conv input rows start 8-byte aligned at best, so
the conv's Triton loads cannot be 16-byte vectors, and the gradients' concatenation took 0.146 s of a 3.23 s epoch
of the figure-2 cell (H100 profile, ``results/SPEED.md``). And where several layers read one input (GatedFWA's qkv,
gate, temperature and output-gate projections of x), autocast casts x once per layer and autograd adds the layers'
input gradients in x's dtype, a float32 pass per layer each way at MQAR N=512, d=512 (H100 profile, same file).

Here x is cast once and each part is one matmul into its own [M, n] tensor; backward, dx accumulates the parts'
products (bf16 inputs on CUDA: in float32 inside the matmuls, ``addmm`` with a float32 output, rounded once to x's
dtype; elsewhere in the matmul dtype, one rounding per part, as autograd sums the gradients of a tensor used twice).
Parts are the reference's bits (but for tall, narrow 16-bit inputs on a GPU, where ``forward.project``'s Triton
matmul writes them, within a rounding of the output); so are the weight gradients, but for a float32 weight under
16-bit autocast on a GPU, whose gradient comes out of its matmul in float32 (``grads.weight_grad``), not rounded to
16 bits and cast.
One part (a single projection, the model's tied head) keeps dx in the matmul's dtype: there is nothing to sum.
"""
from __future__ import annotations

import torch

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.linear.forward import project
from zoo.kernels.linear.grads import SIXTEEN_BIT, weight_grad


def _column_sum(g: torch.Tensor) -> torch.Tensor:
    """[M, n] summed over its rows in float32 (float64 stays float64): ``partial_sums.column_sum`` (Triton, in a
    fixed order) on CUDA, where PyTorch's sum runs far below memory speed on tall gradients; PyTorch's elsewhere."""
    if g.is_cuda:
        from zoo.kernels.partial_sums import column_sum
        return column_sum(g)
    return g.sum(0, dtype=torch.promote_types(g.dtype, torch.float32))


class _LinearParts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dtype, *weights_and_biases):
        weights, biases = weights_and_biases[0::2], weights_and_biases[1::2]
        xc = x if dtype is None else x.to(dtype)
        wcs = [w if dtype is None else w.to(dtype) for w in weights]
        bcs = [b if b is None or dtype is None else b.to(dtype) for b in biases]
        any_weight_grad = any(ctx.needs_input_grad[2::2])
        ctx.save_for_backward(xc if any_weight_grad else None, *(wcs if ctx.needs_input_grad[0] else ()))
        ctx.dtypes = x.dtype, [w.dtype for w in weights], [None if b is None else b.dtype for b in biases]
        ctx.x_shape = x.shape
        return tuple(project(xc, w, b) for w, b in zip(wcs, bcs))

    @staticmethod
    def backward(ctx, *grads):
        xc, *wcs = ctx.saved_tensors
        x_dtype, w_dtypes, b_dtypes = ctx.dtypes
        grads = [g.reshape(-1, g.shape[-1]) for g in grads]
        dx = None
        if ctx.needs_input_grad[0]:
            wide = grads[0].is_cuda and grads[0].dtype in SIXTEEN_BIT and len(grads) > 1
            if wide:  # float32 sums inside the matmuls: no rounding per part, no add kernels
                dx = torch.mm(grads[0], wcs[0], out_dtype=torch.float32)
                for g, w in zip(grads[1:], wcs[1:]):
                    torch.addmm(dx, g, w, out_dtype=torch.float32, out=dx)  # in place: no copy of dx first
            else:
                dx = grads[0] @ wcs[0]
                for g, w in zip(grads[1:], wcs[1:]):
                    dx.addmm_(g, w)
            dx = dx.view(ctx.x_shape).to(x_dtype)
        param_grads = []
        x2 = None if xc is None else xc.reshape(-1, xc.shape[-1])
        for i, g in enumerate(grads):
            dw = weight_grad(g, x2, w_dtypes[i]) if ctx.needs_input_grad[2 + 2 * i] else None
            db = _column_sum(g).to(b_dtypes[i]) if ctx.needs_input_grad[3 + 2 * i] else None
            param_grads += [dw, db]
        return dx, None, *param_grads


def linear_parts(x: torch.Tensor, weights, biases=None) -> tuple[torch.Tensor, ...]:
    """``F.linear(x, w_i, b_i)`` for every weight [n_i, K] (and bias [n_i] or None) of ``weights`` (``biases``) ->
    a contiguous [..., n_i] tensor per part, x cast once; values and dtypes as ``F.linear``'s (autocast too)."""
    biases = [None] * len(weights) if biases is None else list(biases)
    if len(biases) != len(weights) or not weights:
        raise ValueError(f"linear_parts: {len(weights)} weights and {len(biases)} biases: expected one bias (or None) "
                         "per weight, at least one weight")
    pairs = [t for pair in zip(weights, biases) for t in pair]
    return _LinearParts.apply(x, matmul_dtype(x), *pairs)


def split_linear(x: torch.Tensor, weight: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, ...]:
    """x [..., K] @ weight [N, K]^T split into parts of ``sizes`` columns (summing to N) -> a contiguous [..., n]
    tensor per part: ``F.linear(x, weight).split(sizes, -1)``'s values, dtypes as ``F.linear``'s (autocast too)."""
    if sum(sizes) != weight.shape[0]:
        raise ValueError(f"split_linear: sizes {list(sizes)} do not add up to the weight's {weight.shape[0]} rows")
    return linear_parts(x, weight.split(list(sizes)))
