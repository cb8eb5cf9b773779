"""Triton depthwise causal short convolution on the [B, T, C] layout: one forward kernel, one backward kernel (two
under silu).

Each program owns a [BLOCK_T, BLOCK_C] tile of one sequence (channels contiguous, so a row of the tile is one
coalesced load) and reads x at the K shifts t - K + 1 .. t of its times directly from global memory: the shifted
tiles overlap, so all but the first read of each row hit the cache, and nothing is transposed, padded or copied.
x may have any strides (a view such as one chunk of a wider projection is read where it lies); y and dx are
contiguous. Sums run in float32; y and dx come out in x's dtype.

Forward: y[t] = act(pre[t]), pre[t] = bias + sum_j w[:, j] x[t - K + 1 + j] (x = 0 before t = 0).

Backward, with g = dL/dpre = dy (times silu'(pre) under silu, pre recomputed from x rather than saved):
dx[t] = sum_j w[:, j] g[t + K - 1 - j], so a program reads g at K shifted times (mostly cache hits). Under silu a
first kernel writes g to a float32 [B, T, C] buffer: the earlier single kernel recomputed g at each of the K shifts
(K x K loads of x and K sigmoids per value) and took 0.22 ms of Mamba's conv backward at B=256, T=256, C=256, K=4
(H100, bf16), against its forward's 0.04 ms; the two kernels take 0.14 ms (0.07 + 0.11, an epoch's profile
of Mamba's step, 69587b2). dw[:, j] = sum_{b, t} g[t] x[t - K + 1 + j] and dbias = sum_{b, t} g[t]: each
program writes its tile's sums to its own row of a float32 partial [B * time tiles, K (+ 1 with a bias), C] and one
``torch.sum`` over the rows finishes them. No atomics, so the gradients are the same bits on every run; all shapes
follow from the inputs' (no host sync), so a CUDA graph can capture both passes.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.layout import sequence_tile, time_tile
from zoo.kernels.partial_sums import sum_first

# Default tile. 64 channels are one 128-byte row of bf16 (a cache line) and divide the channel counts of the main
# shapes (192 to 1536), so no lane idles; 64 times keep the K - 1 rows read again at a tile's border under 11% and
# the backward's float32 partial sums at (K + 1) / 64 as many rows as x. 4 warps: 32 values per thread and tile.
BLOCK_T, BLOCK_C, NUM_WARPS = 64, 64, 4


@triton.jit
def _tap(W, c, c_ok, sw_c, sw_k, j):
    """Tap j of every channel's filter, float32 [1, BLOCK_C]."""
    return tl.load(W + c * sw_c + j * sw_k, mask=c_ok, other=0.0).to(tl.float32)[None, :]


@triton.jit
def _pre_activation(X, W, BIAS, t, c, c_ok, T, sx_t, sx_c, sw_c, sw_k, K: tl.constexpr):
    """bias + sum_j w[:, j] x[t - K + 1 + j] at times t, float32 [BLOCK_T, BLOCK_C]; X points at one sequence."""
    pre = _tap(W, c, c_ok, sw_c, sw_k, 0) * time_tile(X, t - K + 1, c, c_ok, T, sx_t, sx_c)
    for j in tl.static_range(1, K):
        pre += _tap(W, c, c_ok, sw_c, sw_k, j) * time_tile(X, t - K + 1 + j, c, c_ok, T, sx_t, sx_c)
    if BIAS is not None:
        pre += tl.load(BIAS + c, mask=c_ok, other=0.0).to(tl.float32)[None, :]
    return pre


@triton.jit
def _silu_grad_kernel(X, W, BIAS, DY, G, T, C, sx_b, sx_t, sx_c, sd_b, sd_t, sd_c, sw_c, sw_k, K: tl.constexpr,
                      BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """G [B, T, C] float32 <- dL/dpre = dy * silu'(pre), pre recomputed from x."""
    t, c, b = sequence_tile(BLOCK_T, BLOCK_C)
    c_ok = c < C
    pre = _pre_activation(X + b * sx_b, W, BIAS, t, c, c_ok, T, sx_t, sx_c, sw_c, sw_k, K)
    s = tl.sigmoid(pre)
    g = time_tile(DY + b * sd_b, t, c, c_ok, T, sd_t, sd_c) * s * (1 + pre * (1 - s))
    tl.store(G + b * T * C + t[:, None] * C + c[None, :], g, mask=(t < T)[:, None] & c_ok[None, :])


@triton.jit
def _forward_kernel(X, W, BIAS, Y, T, C, sx_b, sx_t, sx_c, sw_c, sw_k, K: tl.constexpr, SILU: tl.constexpr,
                    BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    t, c, b = sequence_tile(BLOCK_T, BLOCK_C)
    c_ok = c < C
    y = _pre_activation(X + b * sx_b, W, BIAS, t, c, c_ok, T, sx_t, sx_c, sw_c, sw_k, K)
    if SILU:
        y = y * tl.sigmoid(y)
    tl.store(Y + b * T * C + t[:, None] * C + c[None, :], y.to(Y.dtype.element_ty),
             mask=(t < T)[:, None] & c_ok[None, :])


@triton.jit
def _backward_kernel(X, W, G, DX, PARTIAL, T, C, sx_b, sx_t, sx_c, sg_b, sg_t, sg_c, sw_c, sw_k, s_row,
                     K: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """dx and this tile's row of the filter's (and bias's) partial sums from g = dL/dpre."""
    t, c, b = sequence_tile(BLOCK_T, BLOCK_C)
    c_ok = c < C
    X += b * sx_b
    G += b * sg_b
    g = time_tile(G, t, c, c_ok, T, sg_t, sg_c)
    dx = _tap(W, c, c_ok, sw_c, sw_k, K - 1) * g
    for d in tl.static_range(1, K):  # x[t] reached pre[t + d] through tap K - 1 - d
        dx += _tap(W, c, c_ok, sw_c, sw_k, K - 1 - d) * time_tile(G, t + d, c, c_ok, T, sg_t, sg_c)
    tl.store(DX + b * T * C + t[:, None] * C + c[None, :], dx.to(DX.dtype.element_ty),
             mask=(t < T)[:, None] & c_ok[None, :])
    # this tile's row of the partial sums: taps 0..K-1, then the bias
    row = PARTIAL + (b * tl.num_programs(0) + tl.program_id(0)) * s_row + c
    for j in tl.static_range(K):
        tl.store(row + j * C, tl.sum(g * time_tile(X, t - K + 1 + j, c, c_ok, T, sx_t, sx_c), axis=0), mask=c_ok)
    if HAS_BIAS:
        tl.store(row + K * C, tl.sum(g, axis=0), mask=c_ok)


def _grid(x: torch.Tensor, block_t: int, block_c: int) -> tuple[int, int, int]:
    B, T, C = x.shape
    return triton.cdiv(T, block_t), triton.cdiv(C, block_c), B


def short_conv_forward(x, weight, bias, silu: bool, block_t: int, block_c: int) -> torch.Tensor:
    """x [B, T, C] (any strides); weight [C, K]; bias [C] or None -> y [B, T, C], contiguous, in x's dtype."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _forward_kernel[_grid(x, block_t, block_c)](
        x, weight, bias, y, x.shape[1], x.shape[2], *x.stride(), *weight.stride(), K=weight.shape[1], SILU=silu,
        BLOCK_T=block_t, BLOCK_C=block_c, num_warps=NUM_WARPS)
    return y


def short_conv_backward(dy, x, weight, bias, silu: bool, block_t: int, block_c: int):
    """(dx [B, T, C] in x's dtype, dweight [C, K] in weight's dtype, dbias [C] in bias's dtype or None) for the
    output gradient dy [B, T, C] (any strides)."""
    K = weight.shape[1]
    grid = _grid(x, block_t, block_c)
    g = dy
    if silu:  # dL/dpre into memory once: recomputing it at each of the K shifts dx reads cost K times the work
        g = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        _silu_grad_kernel[grid](x, weight, bias, dy, g, x.shape[1], x.shape[2], *x.stride(), *dy.stride(),
                                *weight.stride(), K=K, BLOCK_T=block_t, BLOCK_C=block_c, num_warps=NUM_WARPS)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    partial = torch.empty(grid[0] * grid[2], K + (bias is not None), x.shape[2], dtype=torch.float32,
                          device=x.device)
    _backward_kernel[grid](
        x, weight, g, dx, partial, x.shape[1], x.shape[2], *x.stride(), *g.stride(), *weight.stride(),
        partial.stride(0), K=K, HAS_BIAS=bias is not None, BLOCK_T=block_t, BLOCK_C=block_c, num_warps=NUM_WARPS)
    sums = sum_first(partial)
    return dx, sums[:K].t().to(weight.dtype), None if bias is None else sums[K].to(bias.dtype)


class ShortConvFunction(torch.autograd.Function):
    """:func:`short_conv_forward`, saving only the inputs; :func:`short_conv_backward` recomputes the rest."""

    @staticmethod
    def forward(ctx, x, weight, bias, silu, block_t, block_c):
        ctx.save_for_backward(x, weight, bias)
        ctx.config = silu, block_t, block_c
        return short_conv_forward(x, weight, bias, silu, block_t, block_c)

    @staticmethod
    def backward(ctx, dy):
        return *short_conv_backward(dy, *ctx.saved_tensors, *ctx.config), None, None, None


def short_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               activation: str | None = None, block_t: int = BLOCK_T, block_c: int = BLOCK_C) -> torch.Tensor:
    """``short_conv_naive``'s signature: x [B, T, C]; weight [C, K]; bias [C] or None -> [B, T, C] in x's dtype.

    ``block_t`` / ``block_c``: times / channels per tile, powers of two (tests make them small so that tiles and
    their borders fall inside tiny inputs)."""
    B, T, C = x.shape
    if weight.dim() != 2 or weight.shape[0] != C or (bias is not None and bias.shape != (C,)):
        raise ValueError(f"short_conv: weight {tuple(weight.shape)} and bias "
                         f"{None if bias is None else tuple(bias.shape)} do not fit {C} channels")
    return ShortConvFunction.apply(x, weight, bias, activation == "silu", block_t, block_c)
