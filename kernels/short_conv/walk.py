"""Triton depthwise causal short convolution on the [B, T, C] layout: each program walks a span of times row by row.

A program owns one sequence, a block of channels and a span of consecutive times. It walks the span one row at a
time and keeps the rows the filter still needs in registers (a tuple of K rows, shifted by one every step), so each
row of x and of the output gradient is read from memory once, apart from the K - 1 rows a span shares with the one
before it. Nothing is transposed, padded or copied; x may have any strides (a view such as one chunk of a wider
projection is read where it lies); y and dx are contiguous. Sums run in float32; y and dx come out in x's dtype.

Forward, times ascending: y[t] = act(pre[t]), pre[t] = bias + sum_j w[:, j] x[t - K + 1 + j] (x = 0 before t = 0),
from the window x[t - K + 1 .. t].

Backward, times descending, with g = dL/dpre = dy (times silu'(pre) under silu, pre recomputed from the window
rather than saved): dx[t] = sum_d w[:, K - 1 - d] g[t + d] from g[t] and the K - 1 values of g after it, carried from
the steps before (the span's first step computes those past its end again). dw[:, j] = sum_{b, t} g[t] x[t - K + 1
+ j] and dbias = sum_{b, t} g[t] are summed in registers over the span's times, and each program writes its sums to
its own row of a float32 partial [B * spans, K (+ 1 with a bias), C] that ``sum_first`` finishes. No atomics, so
the gradients are the same bits on every run; all shapes follow from the inputs' (no host sync), so a CUDA graph
captures both passes.

Every step loads the next step's rows before it works on its own, so a load's latency overlaps a step's work.

Against the kernels this replaced ([32, 32] or [32, 64] tiles that read x at the K shifts from the cache, the
backward taking g at later times from its own tile with ``tl.gather``: at Mamba's largest shape it held 255
registers a thread, 12.5% occupancy), each pass alone in a CUDA graph, bf16 x, one H200, us, tiles -> walk
(:data:`LAUNCHES`):

    B, T, C, K                      forward          backward
    128, 512, 1024, 4, silu         100.9 -> 99.4    389.6 -> 188.4    (Mamba, N=512, d=512)
    512, 128, 1024, 4, silu         105.1 -> 99.7    424.3 -> 187.3    (Mamba, N=128, d=512)
    256, 256, 256, 4, silu          28.9 -> 29.6     113.5 -> 53.8     (Mamba, figure 2)
    128, 512, 1536, 3               105.5 -> 110.9   284.0 -> 202.2    (Hyena, N=512, d=512)
    256, 256, 384, 3                28.6 -> 31.8     88.0 -> 61.5      (Hyena, figure 2)
    128, 512, 512, 3                37.1 -> 39.2     109.1 -> 71.6     (BASED, N=512, d=512)

The backward's 400 MB at the first shape need 84 us at the H200's 4.8 TB/s.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from zoo.kernels.partial_sums import sum_first


class Walk(NamedTuple):
    """One pass's launch: times a program walks, channels per program (a power of two), warps per program."""
    times: int
    channels: int
    num_warps: int


class Launch(NamedTuple):
    """The forward's and the backward's launches."""
    forward: Walk
    backward: Walk


# The launch by activation (False: none, True: silu), from a sweep on an H200 of 48 launches per pass (32 to 256
# times, 32 to 512 channels, 1 to 4 warps; bf16 x, each pass timed alone in a CUDA graph) at the grid's shapes:
# Mamba's B, T, C = 128, 512, 1024; 256, 256, 256; 512, 128, 1024 (K=4, silu), Hyena's 128, 512, 1536; 256, 256,
# 384 and BASED's 128, 512, 512 (K=3). Each is within 6% of the best launch at every shape of its kind. The backward
# was fastest at 2 channels a thread with silu and K=4, at 8 without an activation and K=3.
LAUNCHES = {False: Launch(forward=Walk(32, 128, 1), backward=Walk(64, 256, 1)),
            True: Launch(forward=Walk(32, 128, 1), backward=Walk(64, 64, 1))}


@triton.jit
def _row(P, t, c, c_ok, T, s_t, s_c):
    """P[t, c] of one sequence with any strides, float32 [BLOCK_C]; zero outside [0, T) and where ``c_ok`` is False."""
    ok = tl.where((t >= 0) & (t < T), c_ok, False)  # a where: Triton's interpreter refuses a scalar & a vector mask
    return tl.load(P + t * s_t + c * s_c, mask=ok, other=0.0).to(tl.float32)


@triton.jit
def _filter(W, BIAS, c, c_ok, sw_c, sw_k, K: tl.constexpr):
    """(every channel's filter as a tuple of K float32 [BLOCK_C] rows, tap 0 first; its bias, zero without one)."""
    taps = ()
    for j in tl.static_range(K):
        taps = taps + (tl.load(W + c * sw_c + j * sw_k, mask=c_ok, other=0.0).to(tl.float32),)
    bias = tl.load(BIAS + c, mask=c_ok, other=0.0).to(tl.float32) if BIAS is not None else tl.zeros_like(taps[0])
    return taps, bias


@triton.jit
def _window(X, t, c, c_ok, T, sx_t, sx_c, K: tl.constexpr):
    """The rows x[t - K + 1 .. t], oldest first, as a tuple of K float32 [BLOCK_C] rows."""
    window = ()
    for j in tl.static_range(K):
        window = window + (_row(X, t - K + 1 + j, c, c_ok, T, sx_t, sx_c),)
    return window


@triton.jit
def _pre_activation(window, taps, bias, K: tl.constexpr):
    """bias + sum_j w[:, j] x[t - K + 1 + j] from the window of x[t - K + 1 .. t]."""
    pre = bias + taps[0] * window[0]
    for j in tl.static_range(1, K):
        pre += taps[j] * window[j]
    return pre


@triton.jit
def _pre_gradient(dy, pre, SILU: tl.constexpr):
    """g = dL/dpre from the output gradient: dy, times silu'(pre) = s (1 + pre (1 - s)) under silu."""
    if SILU:
        s = tl.sigmoid(pre)
        dy = dy * s * (1 + pre * (1 - s))
    return dy


@triton.jit
def _channels(C, BLOCK_C: tl.constexpr):
    """(channels c [BLOCK_C], c < C) of this program (grid axis 1)."""
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    return c, c < C


@triton.jit
def _short_conv_forward_kernel(X, W, BIAS, Y, T, C, sx_b, sx_t, sx_c, sw_c, sw_k, K: tl.constexpr, SILU: tl.constexpr,
                               TIMES: tl.constexpr, BLOCK_C: tl.constexpr):
    c, c_ok = _channels(C, BLOCK_C)
    b = tl.program_id(2).to(tl.int64)
    X += b * sx_b
    Y += b * T * C
    start = tl.program_id(0) * TIMES
    taps, bias = _filter(W, BIAS, c, c_ok, sw_c, sw_k, K)
    window = _window(X, start - 1, c, c_ok, T, sx_t, sx_c, K)  # its oldest row drops out at the first step
    ahead = _row(X, start, c, c_ok, T, sx_t, sx_c)
    for t in range(start, tl.minimum(start + TIMES, T)):
        window = window[1:] + (ahead,)
        ahead = _row(X, t + 1, c, c_ok, T, sx_t, sx_c)
        y = _pre_activation(window, taps, bias, K)
        if SILU:
            y = y * tl.sigmoid(y)
        tl.store(Y + t * C + c, y.to(Y.dtype.element_ty), mask=c_ok)


@triton.jit
def _short_conv_backward_kernel(X, W, BIAS, DY, DX, PARTIAL, T, C, sx_b, sx_t, sx_c, sd_b, sd_t, sd_c, sw_c, sw_k,
                                s_row, K: tl.constexpr, SILU: tl.constexpr, TIMES: tl.constexpr, BLOCK_C: tl.constexpr):
    c, c_ok = _channels(C, BLOCK_C)
    b = tl.program_id(2).to(tl.int64)
    X += b * sx_b
    DY += b * sd_b
    DX += b * T * C
    start = tl.program_id(0) * TIMES
    end = tl.minimum(start + TIMES, T)
    taps, bias = _filter(W, BIAS, c, c_ok, sw_c, sw_k, K)
    # g at the K - 1 times after the span, newest last (zero past T): dx at the span's last times reads them
    later = ()
    for d in tl.static_range(K - 1, 0, -1):
        pre = _pre_activation(_window(X, end - 1 + d, c, c_ok, T, sx_t, sx_c, K), taps, bias, K)
        later = later + (_pre_gradient(_row(DY, end - 1 + d, c, c_ok, T, sd_t, sd_c), pre, SILU),)
    window = _window(X, end, c, c_ok, T, sx_t, sx_c, K)  # x[end - K + 1 .. end]: its newest row drops out first
    before = _row(X, end - K, c, c_ok, T, sx_t, sx_c)
    dy_ahead = _row(DY, end - 1, c, c_ok, T, sd_t, sd_c)
    sums = ()  # this span's sums of g x[t - K + 1 + j], tap 0 first, then of g (the bias's)
    for j in tl.static_range(K + 1):
        sums = sums + (tl.zeros_like(taps[0]),)
    for i in range(end - start):
        t = end - 1 - i
        window = (before,) + window[:-1]  # x[t - K + 1 .. t]
        before = _row(X, t - K, c, c_ok, T, sx_t, sx_c)
        dy = dy_ahead
        dy_ahead = _row(DY, t - 1, c, c_ok, T, sd_t, sd_c)
        g = _pre_gradient(dy, _pre_activation(window, taps, bias, K), SILU)
        dx = taps[K - 1] * g
        for d in tl.static_range(1, K):  # x[t] reached pre[t + d] through tap K - 1 - d
            dx += taps[K - 1 - d] * later[K - 1 - d]
        tl.store(DX + t * C + c, dx.to(DX.dtype.element_ty), mask=c_ok)
        new_sums = ()
        for j in tl.static_range(K):
            new_sums = new_sums + (sums[j] + g * window[j],)
        sums = new_sums + (sums[K] + g,)
        if K > 1:
            later = later[1:] + (g,)
    row = PARTIAL + (b * tl.num_programs(0) + tl.program_id(0)) * s_row + c
    for j in tl.static_range(K):
        tl.store(row + j * C, sums[j], mask=c_ok)
    if BIAS is not None:
        tl.store(row + K * C, sums[K], mask=c_ok)


def _grid(T: int, C: int, B: int, walk: Walk) -> tuple[int, int, int]:
    """(spans of times, channel blocks, sequences): spans on axis 0, so programs launched together share the rows at
    their borders in the cache."""
    return triton.cdiv(T, walk.times), triton.cdiv(C, walk.channels), B


def short_conv_forward(x, weight, bias, silu: bool, walk: Walk) -> torch.Tensor:
    """x [B, T, C] (any strides); weight [C, K]; bias [C] or None -> y [B, T, C], contiguous, in x's dtype."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    B, T, C = x.shape
    _short_conv_forward_kernel[_grid(T, C, B, walk)](
        x, weight, bias, y, T, C, *x.stride(), *weight.stride(), K=weight.shape[1], SILU=silu, TIMES=walk.times,
        BLOCK_C=walk.channels, num_warps=walk.num_warps)
    return y


def short_conv_backward(dy, x, weight, bias, silu: bool, walk: Walk):
    """(dx [B, T, C] in x's dtype, dweight [C, K] in weight's dtype, dbias [C] in bias's dtype or None) for the
    output gradient dy [B, T, C] (any strides)."""
    B, T, C = x.shape
    K = weight.shape[1]
    grid = _grid(T, C, B, walk)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    partial = torch.empty(grid[0] * B, K + (bias is not None), C, dtype=torch.float32, device=x.device)
    _short_conv_backward_kernel[grid](
        x, weight, bias, dy, dx, partial, T, C, *x.stride(), *dy.stride(), *weight.stride(), partial.stride(0), K=K,
        SILU=silu, TIMES=walk.times, BLOCK_C=walk.channels, num_warps=walk.num_warps)
    sums = sum_first(partial)
    return dx, sums[:K].t().to(weight.dtype), None if bias is None else sums[K].to(bias.dtype)


class ShortConvFunction(torch.autograd.Function):
    """:func:`short_conv_forward`, saving only the inputs; :func:`short_conv_backward` recomputes the rest."""

    @staticmethod
    def forward(ctx, x, weight, bias, silu, launch):
        ctx.save_for_backward(x, weight, bias)
        ctx.silu, ctx.walk = silu, launch.backward
        return short_conv_forward(x, weight, bias, silu, launch.forward)

    @staticmethod
    def backward(ctx, dy):
        return *short_conv_backward(dy, *ctx.saved_tensors, ctx.silu, ctx.walk), None, None


def short_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               activation: str | None = None, launch: Launch | None = None) -> torch.Tensor:
    """``short_conv_naive``'s signature: x [B, T, C]; weight [C, K]; bias [C] or None -> [B, T, C] in x's dtype.

    ``launch``: both passes' (None: :data:`LAUNCHES`'s for the activation; tests make spans and channel blocks
    small so that their borders fall inside tiny inputs)."""
    B, T, C = x.shape
    if weight.dim() != 2 or weight.shape[0] != C or (bias is not None and bias.shape != (C,)):
        raise ValueError(f"short_conv: weight {tuple(weight.shape)} and bias "
                         f"{None if bias is None else tuple(bias.shape)} do not fit {C} channels")
    silu = activation == "silu"
    return ShortConvFunction.apply(x, weight, bias, silu, launch or LAUNCHES[silu])
