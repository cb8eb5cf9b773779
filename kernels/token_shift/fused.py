"""Triton token-shift mix on the [B, T, D] layout: one forward and one backward kernel for all G mixes.

Each program owns a [BLOCK_T, BLOCK_D] tile of one sequence and reads x at its times t and, for x_prev, at t - 1:
the two tiles overlap in all but one row, so the second read mostly hits the cache, and nothing is padded or copied.
x may have any batch and time strides (a chunk of a wider tensor is read where it lies; a last dim that is not
contiguous is copied first). The mixes' outputs and x's gradient are contiguous. Math in float32 throughout.

Forward: out_g[t] = x[t] + (x[t - 1] - x[t]) m_g, each output rounded once to its dtype (``out_dtype``, so an
output that feeds a bf16 matmul under autocast is not written in float32 and cast again).

Backward, with dy_g the gradient of out_g: x[t] feeds out_g[t] with weight 1 - m_g and, as x_prev, out_g[t + 1]
with weight m_g, so dx[t] = sum_g dy_g[t] + (dy_g[t + 1] - dy_g[t]) m_g (the t + 1 tile again mostly cache hits).
dm_g = sum_{b, t} dy_g[t] (x[t - 1] - x[t]): each program walks several time tiles (``BACKWARD``), writes its walk's
sums to its own row of a float32 partial [B * walks, G, D], and one sum over the rows finishes them. No atomics, so
the gradients are the same bits on every run; all shapes follow from the inputs' (no host sync), so a CUDA graph can
capture both.
A mix whose output gets no gradient (autograd's None) adds nothing and its dm_g is 0.

Triton kernels take a fixed list of pointers, so the G outputs (and G output gradients) travel in ``MAX_MIXES``
pointer slots, the unused ones None (each slot's code is then compiled out).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from zoo.kernels.layout import even_walks, last_dim_contiguous, sequence_tile, time_tile
from zoo.kernels.partial_sums import sum_first

MAX_MIXES = 6  # pointer slots: RWKV-7's six mixes (the kernel bench's unfolded row of its projections)


class Tiles(NamedTuple):
    """A pass's tile: times, channels (powers of two), warps per program."""
    t: int
    d: int
    warps: int


# The forward's tile: 64 channels are one 128-byte row of bf16 (a cache line); 64 times keep the row read twice at
# a tile's border under 2%; 8 warps, 16 values per thread and tile. It moved 3.6 to 3.9 TB/s on an H200 (x in
# float32, three bf16 outputs; B=128, T=512, D=512 and B=256, T=256, D=128).
FORWARD = Tiles(64, 64, 8)
# The backward's: each program walks several time tiles of one sequence and channel block (``_walks``), keeping
# its products dy_g * diff per element and summing them over times once at the end, while at least
# ``MIN_PROGRAMS`` programs remain. Measured on an H200 (torch 2.11, Triton 3.6; the backward kernel alone in a CUDA
# graph, x float32, bf16 output gradients; B, T, D, mixes G), us, against the kernel before (64 x 64 tiles, 8 warps,
# one tile a program, its sums over times in every tile): 239.1 -> 166.4 at 128, 512, 512, G=3; 66.9 -> 53.0 at
# 256, 256, 128, G=3; 239.5 -> 181.1 at 512, 128, 512, G=3; 112.2 -> 89.1 at 256, 256, 128, G=6 (RWKV-7's). The
# best of the 9 launches tried (16 to 64 times, 64 or 128 channels, 4 or 8 warps, walks for 512 to 4096 programs)
# was within 4% at each shape.
BACKWARD = Tiles(16, 64, 4)
MIN_PROGRAMS = 1024


@triton.jit
def _mix(MIX, g, d, d_ok, D):
    """mixes[g] over the tile's channels, float32 [1, BLOCK_D] (mixes contiguous [G, D])."""
    return tl.load(MIX + g * D + d, mask=d_ok, other=0.0).to(tl.float32)[None, :]


@triton.jit
def _store_mix(Y, g, MIX, x, diff, d, d_ok, D, offs, ok):
    """Y[offs] = x + diff * mixes[g] in Y's dtype; nothing for an unused slot."""
    if Y is not None:
        tl.store(Y + offs, (x + diff * _mix(MIX, g, d, d_ok, D)).to(Y.dtype.element_ty), mask=ok)


@triton.jit
def _add_mix_grad(DY, g, MIX, seq, diff, dx, acc, t, d, d_ok, T, D):
    """(dx plus what x[t] gets through mix g, acc plus dy_g * diff: the tile's share of dm_g, per element); both
    unchanged for an unused slot or a mix without a gradient. DY: that mix's output gradient, contiguous [B, T, D]."""
    if DY is not None:
        dy = time_tile(DY + seq, t, d, d_ok, T, D, 1)
        dx += dy + (time_tile(DY + seq, t + 1, d, d_ok, T, D, 1) - dy) * _mix(MIX, g, d, d_ok, D)
        acc += dy * diff
    return dx, acc


@triton.jit
def _store_mix_sum(DY, ROW, g, acc, d, d_ok, D):
    """ROW[g] = the walk's sum of dy_g * diff over its times; nothing for an unused slot or a mix without a
    gradient."""
    if DY is not None:
        tl.store(ROW + g * D + d, tl.sum(acc, axis=0), mask=d_ok)


@triton.jit
def _token_shift_forward_kernel(X, MIX, Y0, Y1, Y2, Y3, Y4, Y5, T, D, sx_b, sx_t, BLOCK_T: tl.constexpr,
                                BLOCK_D: tl.constexpr):
    t, d, b = sequence_tile(BLOCK_T, BLOCK_D)
    d_ok = d < D
    X += b * sx_b
    x = time_tile(X, t, d, d_ok, T, sx_t, 1)
    diff = time_tile(X, t - 1, d, d_ok, T, sx_t, 1) - x  # x_prev - x, x_prev = 0 at t = 0
    offs = b * T * D + t[:, None] * D + d[None, :]
    ok = (t < T)[:, None] & d_ok[None, :]
    _store_mix(Y0, 0, MIX, x, diff, d, d_ok, D, offs, ok)
    _store_mix(Y1, 1, MIX, x, diff, d, d_ok, D, offs, ok)
    _store_mix(Y2, 2, MIX, x, diff, d, d_ok, D, offs, ok)
    _store_mix(Y3, 3, MIX, x, diff, d, d_ok, D, offs, ok)
    _store_mix(Y4, 4, MIX, x, diff, d, d_ok, D, offs, ok)
    _store_mix(Y5, 5, MIX, x, diff, d, d_ok, D, offs, ok)


@triton.jit
def _token_shift_backward_kernel(X, MIX, DY0, DY1, DY2, DY3, DY4, DY5, DX, PARTIAL, T, D, sx_b, sx_t, s_row,
                                 tiles_per_program, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """Walks ``tiles_per_program`` time tiles of one sequence and channel block, keeping each mix's products
    dy_g * diff per element and summing them over times once, at the end, into its row of the partial sums."""
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    b = tl.program_id(2).to(tl.int64)
    d_ok = d < D
    X += b * sx_b
    seq = b * T * D  # the sequence's start in the contiguous gradients
    acc0 = tl.zeros([BLOCK_T, BLOCK_D], dtype=tl.float32)
    acc1, acc2, acc3, acc4, acc5 = acc0, acc0, acc0, acc0, acc0
    for i in range(tiles_per_program):
        t = (tl.program_id(0) * tiles_per_program + i) * BLOCK_T + tl.arange(0, BLOCK_T)
        diff = time_tile(X, t - 1, d, d_ok, T, sx_t, 1) - time_tile(X, t, d, d_ok, T, sx_t, 1)
        dx = tl.zeros([BLOCK_T, BLOCK_D], dtype=tl.float32)
        dx, acc0 = _add_mix_grad(DY0, 0, MIX, seq, diff, dx, acc0, t, d, d_ok, T, D)
        dx, acc1 = _add_mix_grad(DY1, 1, MIX, seq, diff, dx, acc1, t, d, d_ok, T, D)
        dx, acc2 = _add_mix_grad(DY2, 2, MIX, seq, diff, dx, acc2, t, d, d_ok, T, D)
        dx, acc3 = _add_mix_grad(DY3, 3, MIX, seq, diff, dx, acc3, t, d, d_ok, T, D)
        dx, acc4 = _add_mix_grad(DY4, 4, MIX, seq, diff, dx, acc4, t, d, d_ok, T, D)
        dx, acc5 = _add_mix_grad(DY5, 5, MIX, seq, diff, dx, acc5, t, d, d_ok, T, D)
        tl.store(DX + seq + t[:, None] * D + d[None, :], dx.to(DX.dtype.element_ty),
                 mask=(t < T)[:, None] & d_ok[None, :])
    row = PARTIAL + (b * tl.num_programs(0) + tl.program_id(0)) * s_row  # this walk's [G, D] of partial sums
    _store_mix_sum(DY0, row, 0, acc0, d, d_ok, D)
    _store_mix_sum(DY1, row, 1, acc1, d, d_ok, D)
    _store_mix_sum(DY2, row, 2, acc2, d, d_ok, D)
    _store_mix_sum(DY3, row, 3, acc3, d, d_ok, D)
    _store_mix_sum(DY4, row, 4, acc4, d, d_ok, D)
    _store_mix_sum(DY5, row, 5, acc5, d, d_ok, D)


def _slots(tensors) -> tuple:
    """``tensors`` padded with None to the kernels' ``MAX_MIXES`` pointer slots."""
    return *tensors, *(None,) * (MAX_MIXES - len(tensors))


def _grid(x: torch.Tensor, block_t: int, block_d: int) -> tuple[int, int, int]:
    B, T, D = x.shape
    return triton.cdiv(T, block_t), triton.cdiv(D, block_d), B


def token_shift_forward(x, mixes, out_dtype: torch.dtype, tiles: Tiles) -> tuple[torch.Tensor, ...]:
    """x [B, T, D] (unit last stride); mixes [G, D], contiguous -> G outputs [B, T, D], contiguous, in
    ``out_dtype``."""
    ys = tuple(torch.empty(x.shape, dtype=out_dtype, device=x.device) for _ in range(mixes.shape[0]))
    _token_shift_forward_kernel[_grid(x, tiles.t, tiles.d)](
        x, mixes, *_slots(ys), x.shape[1], x.shape[2], x.stride(0), x.stride(1), BLOCK_T=tiles.t, BLOCK_D=tiles.d,
        num_warps=tiles.warps)
    return ys


def _walks(x: torch.Tensor, block_t: int, block_d: int) -> tuple[int, int]:
    """(time tiles a backward program walks, programs along time): each program walks as many tiles of its sequence
    as still leaves ``MIN_PROGRAMS`` programs, the walks as even as the tiles allow."""
    B, T, D = x.shape
    return even_walks(triton.cdiv(T, block_t), triton.cdiv(MIN_PROGRAMS, B * triton.cdiv(D, block_d)))


def token_shift_backward(dys, x, mixes, tiles: Tiles) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx [B, T, D] in x's dtype, dmixes [G, D] in mixes' dtype) for the outputs' gradients ``dys`` (G, each
    [B, T, D] with any strides, or None)."""
    dys = [None if dy is None else dy.contiguous() for dy in dys]
    per_program, along_time = _walks(x, tiles.t, tiles.d)
    grid = along_time, triton.cdiv(x.shape[2], tiles.d), x.shape[0]
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    # a mix without a gradient writes no partial sums: its rows must start at zero
    new = torch.zeros if any(dy is None for dy in dys) else torch.empty
    partial = new(grid[0] * grid[2], *mixes.shape, dtype=torch.float32, device=x.device)
    _token_shift_backward_kernel[grid](
        x, mixes, *_slots(dys), dx, partial, x.shape[1], x.shape[2], x.stride(0), x.stride(1), partial.stride(0),
        per_program, BLOCK_T=tiles.t, BLOCK_D=tiles.d, num_warps=tiles.warps)
    return dx, sum_first(partial).to(mixes.dtype)


class TokenShiftMixFunction(torch.autograd.Function):
    """:func:`token_shift_forward`, saving only its inputs; :func:`token_shift_backward` with the G output
    gradients as autograd hands them over (None for an output without one: nothing is materialized)."""

    @staticmethod
    def forward(ctx, x, mixes, out_dtype, forward_tiles, backward_tiles):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, mixes)
        ctx.tiles = backward_tiles
        return token_shift_forward(x, mixes, out_dtype, forward_tiles)

    @staticmethod
    def backward(ctx, *dys):
        return *token_shift_backward(dys, *ctx.saved_tensors, ctx.tiles), None, None, None


def token_shift_mix(x: torch.Tensor, mixes: torch.Tensor, out_dtype: torch.dtype | None = None,
                    block_t: int | None = None, block_d: int | None = None) -> tuple[torch.Tensor, ...]:
    """``token_shift_mix_naive``'s signature: x [B, T, D]; mixes [G, D], G <= ``MAX_MIXES`` -> G tensors
    [B, T, D] in ``out_dtype`` (None: x's dtype).

    ``block_t`` / ``block_d``: times / channels per tile of both passes, powers of two (None: each pass's own,
    ``FORWARD`` and ``BACKWARD``; tests make them small so that tiles and their borders fall inside tiny inputs)."""
    if not 1 <= mixes.shape[0] <= MAX_MIXES:
        raise ValueError(f"token_shift_mix: mixes {tuple(mixes.shape)} are not valid for the Triton kernels: "
                         f"expected 1 to {MAX_MIXES} mixes")
    forward, backward = (tiles._replace(t=block_t or tiles.t, d=block_d or tiles.d) for tiles in (FORWARD, BACKWARD))
    return TokenShiftMixFunction.apply(last_dim_contiguous(x), mixes.contiguous(),
                                       x.dtype if out_dtype is None else out_dtype, forward, backward)
