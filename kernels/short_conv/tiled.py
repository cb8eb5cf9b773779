"""Triton depthwise causal short convolution on the [B, T, C] layout: one forward kernel, one backward kernel.

Each program owns a [BLOCK_T, BLOCK_C] tile of one sequence (channels contiguous, so a row of the tile is one
coalesced load) and reads x at the K shifts t - K + 1 .. t of its times directly from global memory: the shifted
tiles overlap, so all but the first read of each row hit the cache, and nothing is transposed, padded or copied.
x may have any strides (a view such as one chunk of a wider projection is read where it lies); y and dx are
contiguous. Sums run in float32; y and dx come out in x's dtype.

Forward: y[t] = act(pre[t]), pre[t] = bias + sum_j w[:, j] x[t - K + 1 + j] (x = 0 before t = 0).

Backward, with g = dL/dpre = dy (times silu'(pre) under silu, pre recomputed from x rather than saved):
dx[t] = sum_j w[:, j] g[t + K - 1 - j]. A program computes g once at its BLOCK_T times and takes g[t + d] from its
own tile (``tl.gather`` along time, inside the warp with one warp a program), so it owns dx at its first
BLOCK_T - K + 1 times; the last K - 1 are the next program's, computed twice (3 of 32 at K = 4).
dw[:, j] = sum_{b, t} g[t] x[t - K + 1 + j] and dbias = sum_{b, t} g[t]: each program writes its own times' sums
to its own row of a float32 partial [B * time tiles, K (+ 1 with a bias), C] and ``sum_first`` over the rows
finishes them. No atomics, so the gradients are the same bits on every run; all shapes follow from the inputs' (no
host sync), so a CUDA graph can capture both passes.

Measured on an H100 80GB (one backward call, bf16, silu, B=256, T=256, K=4, C=256 / 512, us): 179 / 340 for the
earlier form (64 x 64 tiles of 4 warps; a first kernel wrote g to a float32 [B, T, C] buffer that a second read at
K shifts), 174 / 340 for this one at that launch, 96 / 185 at its launch now (:data:`TILES`). At 64 x 64 the sums
over times were half the time (74 us without them at C=256). g recomputed at each shift instead of shared (K x K
loads of x, K sigmoids per value) was slower at every launch tried; g through a per-program scratch in memory was
slower at the fastest ones (113.5 against 99.9 us at C=256).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from zoo.kernels.layout import sequence_tile, time_tile
from zoo.kernels.partial_sums import sum_first

class Tiles(NamedTuple):
    """One launch of both passes: times and channels per program (powers of two), warps per program."""
    block_t: int
    block_c: int
    num_warps: int


# The launch by activation (False: none, True: silu): the fastest of 10 (16 to 128 times, 32 to 128 channels, 1 to
# 4 warps) for both passes at B=256, T=256 and C=256, 384, 512, and B=128, T=512, C=1024 (K=3 or 4, bf16, an H100
# 80GB, ``results/SPEED.md``). One warp keeps the backward's sums over a tile's times (the filter and bias
# gradients) and its shifts of g inside a warp; at 64 x 64 with 4 warps those sums took half the backward's time.
# Under silu the backward at 32 x 32 was 1.7 to 1.9 times faster than at 64 x 64, and than at 32 x 64 (96 against
# 144 us at C=256); without an activation 32 x 64 was the fastest.
TILES = {False: Tiles(32, 64, 1), True: Tiles(32, 32, 1)}


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
def _backward_kernel(X, W, BIAS, DY, DX, PARTIAL, T, C, sx_b, sx_t, sx_c, sd_b, sd_t, sd_c, sw_c, sw_k, s_row,
                     K: tl.constexpr, SILU: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """dx and the partial sums' row of the tile's own times, its first BLOCK_T - K + 1, from g = dL/dpre at all
    BLOCK_T: dx[t] reads g up to t + K - 1, so the last K - 1 times are the next tile's own, computed here again."""
    OWN: tl.constexpr = BLOCK_T - K + 1
    i = tl.arange(0, BLOCK_T)
    t = tl.program_id(0) * OWN + i
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    b = tl.program_id(2).to(tl.int64)
    c_ok = c < C
    X += b * sx_b
    g = time_tile(DY + b * sd_b, t, c, c_ok, T, sd_t, sd_c)
    if SILU:  # silu'(pre) = s (1 + pre (1 - s)), pre recomputed from x
        pre = _pre_activation(X, W, BIAS, t, c, c_ok, T, sx_t, sx_c, sw_c, sw_k, K)
        s = tl.sigmoid(pre)
        g = g * s * (1 + pre * (1 - s))
    dx = _tap(W, c, c_ok, sw_c, sw_k, K - 1) * g
    for d in tl.static_range(1, K):  # x[t] reached pre[t + d] through tap K - 1 - d; g[t + d] from the tile itself
        ahead = tl.broadcast_to(tl.minimum(i + d, BLOCK_T - 1)[:, None], (BLOCK_T, BLOCK_C))
        dx += _tap(W, c, c_ok, sw_c, sw_k, K - 1 - d) * tl.gather(g, ahead, 0)
    own = (i < OWN) & (t < T)
    tl.store(DX + b * T * C + t[:, None] * C + c[None, :], dx.to(DX.dtype.element_ty),
             mask=own[:, None] & c_ok[None, :])
    # this tile's row of the partial sums over its own times: taps 0..K-1, then the bias
    g = tl.where(own[:, None], g, 0.0)
    row = PARTIAL + (b * tl.num_programs(0) + tl.program_id(0)) * s_row + c
    for j in tl.static_range(K):
        tl.store(row + j * C, tl.sum(g * time_tile(X, t - K + 1 + j, c, c_ok, T, sx_t, sx_c), axis=0), mask=c_ok)
    if BIAS is not None:
        tl.store(row + K * C, tl.sum(g, axis=0), mask=c_ok)


def short_conv_forward(x, weight, bias, silu: bool, tiles: Tiles) -> torch.Tensor:
    """x [B, T, C] (any strides); weight [C, K]; bias [C] or None -> y [B, T, C], contiguous, in x's dtype."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    B, T, C = x.shape
    _forward_kernel[triton.cdiv(T, tiles.block_t), triton.cdiv(C, tiles.block_c), B](
        x, weight, bias, y, T, C, *x.stride(), *weight.stride(), K=weight.shape[1], SILU=silu,
        BLOCK_T=tiles.block_t, BLOCK_C=tiles.block_c, num_warps=tiles.num_warps)
    return y


def backward_block_t(block_t: int, K: int) -> int:
    """The backward's times per tile: ``block_t``, or the least power of two that owns at least one time (K)."""
    return max(block_t, triton.next_power_of_2(K))


def short_conv_backward(dy, x, weight, bias, silu: bool, tiles: Tiles):
    """(dx [B, T, C] in x's dtype, dweight [C, K] in weight's dtype, dbias [C] in bias's dtype or None) for the
    output gradient dy [B, T, C] (any strides)."""
    B, T, C = x.shape
    K = weight.shape[1]
    block_t = backward_block_t(tiles.block_t, K)
    grid = triton.cdiv(T, block_t - K + 1), triton.cdiv(C, tiles.block_c), B
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    partial = torch.empty(grid[0] * B, K + (bias is not None), C, dtype=torch.float32, device=x.device)
    _backward_kernel[grid](
        x, weight, bias, dy, dx, partial, T, C, *x.stride(), *dy.stride(), *weight.stride(), partial.stride(0), K=K,
        SILU=silu, BLOCK_T=block_t, BLOCK_C=tiles.block_c, num_warps=tiles.num_warps)
    sums = sum_first(partial)
    return dx, sums[:K].t().to(weight.dtype), None if bias is None else sums[K].to(bias.dtype)


class ShortConvFunction(torch.autograd.Function):
    """:func:`short_conv_forward`, saving only the inputs; :func:`short_conv_backward` recomputes the rest."""

    @staticmethod
    def forward(ctx, x, weight, bias, silu, tiles):
        ctx.save_for_backward(x, weight, bias)
        ctx.config = silu, tiles
        return short_conv_forward(x, weight, bias, silu, tiles)

    @staticmethod
    def backward(ctx, dy):
        return *short_conv_backward(dy, *ctx.saved_tensors, *ctx.config), None, None


def short_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               activation: str | None = None, tiles: Tiles | None = None) -> torch.Tensor:
    """``short_conv_naive``'s signature: x [B, T, C]; weight [C, K]; bias [C] or None -> [B, T, C] in x's dtype.

    ``tiles``: the launch (None: :data:`TILES`'s for the activation; tests make tiles small so that tiles and their
    borders fall inside tiny inputs)."""
    B, T, C = x.shape
    if weight.dim() != 2 or weight.shape[0] != C or (bias is not None and bias.shape != (C,)):
        raise ValueError(f"short_conv: weight {tuple(weight.shape)} and bias "
                         f"{None if bias is None else tuple(bias.shape)} do not fit {C} channels")
    silu = activation == "silu"
    return ShortConvFunction.apply(x, weight, bias, silu, tiles or TILES[silu])
