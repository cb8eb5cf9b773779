"""Triton LayerNorm and RMSNorm over the last dim, with an optional swish gate: one forward and one backward kernel.

The gate multiplies the normalized row (``norm(x) * silu(z)``, GatedFWA's output norm) or, with ``gate_first``, the
row before it is normalized (``norm(x * silu(z))``, Mamba-2's gated norm, mamba-ssm's ``norm_before_gate=False``):
either way x and z are read once, and the product never goes through memory.

Rows: x [..., N] is read as [M / H, H, N] with H = x.shape[-2] (1 for 2-d x), through one stride per row
dim, so a strided view such as q of a fused qkv projection ([B, L, H, d] with strides (3 L D, 3 D, d, 1))
is read where it lies, without a copy; only a tensor whose leading dims do not fold into two (or whose last
dim is not contiguous) is copied. Outputs and input gradients are contiguous.

Forward: each program normalizes a [ROWS, BLOCK_N] tile (BLOCK_N = N rounded up to a power of two, ROWS
rows so that a tile holds about 4096 values): narrow rows (N = 16..128) still give a program enough work
to stream memory at full speed. It stores the mean (LayerNorm) and 1/std of each row for the backward.

Backward: a fixed number of programs (a few per SM) each walk a contiguous run of tiles, write dx (and
dz), and keep their own running sums of the weight and bias gradients in registers, stored once as one row
of a [programs, N] float32 partial; one column sum over programs finishes both. Rows go to programs in a
fixed way and nothing is added atomically, so gradients are the same on every run.

Residual add (``add_norm_triton``): a pre-norm block adds each mixer's output r to the residual stream x and
the next norm reads the sum. Fused, the forward reads x and r once and writes s = x + r (in their promoted
dtype) and norm(s); the backward adds the gradient that reaches s from its later uses to the norm's own and
writes it for x and, in r's dtype, for r. Apart, that is an add, a norm reading s again, autograd's sum of the
two gradients and its cast to r's dtype: per block at MQAR's figure-2 cell, about 130 MB of the (65536, 128)
float32 stream and three launches fewer. Measured with two other changes of 455c545 (gradients set to None in CUDA
graphs, the backward's per-element weight and bias sums; H100, softmax's CUDA-graph step at that cell): the step
went from 2.05 to 1.89 ms, and in an epoch's profile the elementwise kernels and reductions from 0.228 to 0.183 s
while the norm kernels stayed at 0.10 s.

Two more steps can join the add (``_Norm``'s arguments): the embedding's rows gathered by id in place of x, then
dropout on them (``ids``, ``dropout``: the mask of ``embedding.dropout``, drawn again backward from the saved seed),
and a pre norm between the add and this one (``pre_*``: s1 = x + r stored for the backward, s = s1 + pre(s1), as
Zoology's block with its Identity state mixer adds its norm2's output): the backward then walks back through the
pre norm in the same pass, summing its weight and bias gradients beside this norm's.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.backend import not_compiled
from zoo.kernels.embedding.dropout import kept_by_dropout
from zoo.kernels.layout import even_walks, last_dim_contiguous, resident_programs
from zoo.kernels.partial_sums import column_sum, sum_rows

TILE = 4096  # values per program and tile: 16 per thread with 8 warps
NUM_WARPS = 8


@triton.jit
def _offsets(rows, cols, H, s0, s1):
    """[ROWS, BLOCK_N] offsets of rows of a [M / H, H, N] tensor with strides (s0, s1, 1)."""
    return ((rows // H) * s0 + (rows % H) * s1)[:, None] + cols[None, :]


@triton.jit
def _param(P, cols, col_ok, default: tl.constexpr, BLOCK_N: tl.constexpr):
    """P[cols] in float32, or ``default`` in every column where there is no P."""
    if P is None:
        p = tl.full([BLOCK_N], default, tl.float32)
    else:
        p = tl.load(P + cols, mask=col_ok, other=0.0).to(tl.float32)
    return p


@triton.jit
def _norm_fwd_kernel(X, IDS, R, Z, W, B, S, Y, MEAN, RSTD, SEED, S1, PW, PB, PMEAN, PRSTD, M, H, N, x_s0, x_s1,
                     r_s0, r_s1, z_s0, z_s1, eps, p, scale, pre_eps, RMS: tl.constexpr, GATE_FIRST: tl.constexpr,
                     ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    row_ok, col_ok = rows < M, cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    if IDS is None:
        x_offsets = _offsets(rows, cols, H, x_s0, x_s1)
    else:  # X is a table: row i is its row IDS[i]
        x_offsets = (tl.load(IDS + rows, mask=row_ok, other=0) * x_s0)[:, None] + cols[None, :]
    x = tl.load(X + x_offsets, mask=mask, other=0.0).to(tl.float32)
    if R is not None:  # normalize the sum s = x + r
        x += tl.load(R + _offsets(rows, cols, H, r_s0, r_s1), mask=mask, other=0.0).to(tl.float32)
    if SEED is not None:  # the embedding's dropout: its mask drawn as the embedding_dropout op draws it
        x = tl.where(kept_by_dropout(SEED, rows, cols, N, p), x * scale, 0.0)
    # Zoology's normed block: the sum s1 = x + r (stored in its dtype, as the add alone stores s), then s = s1 + pre(s1)
    if S1 is not None:
        x = x.to(S1.dtype.element_ty)
        tl.store(S1 + rows[:, None] * N + cols[None, :], x, mask=mask)
        x = x.to(tl.float32)
        pmean = tl.sum(x, axis=1) / N
        pxc = tl.where(mask, x - pmean[:, None], 0.0)
        prstd = tl.rsqrt(tl.sum(pxc * pxc, axis=1) / N + pre_eps)
        tl.store(PMEAN + rows, pmean, mask=row_ok)
        tl.store(PRSTD + rows, prstd, mask=row_ok)
        pw = _param(PW, cols, col_ok, 1.0, BLOCK_N)
        pb = _param(PB, cols, col_ok, 0.0, BLOCK_N)
        # the pre norm's output rounded to s1's dtype, its dtype apart (the entry checks that they are one)
        x += (pxc * prstd[:, None] * pw[None, :] + pb[None, :]).to(S1.dtype.element_ty).to(tl.float32)
    if S is not None:  # s stored in its dtype and normalized as stored
        x = x.to(S.dtype.element_ty)
        tl.store(S + rows[:, None] * N + cols[None, :], x, mask=mask)
        x = x.to(tl.float32)
    if Z is not None:
        z = tl.load(Z + _offsets(rows, cols, H, z_s0, z_s1), mask=mask, other=0.0).to(tl.float32)
        if GATE_FIRST:
            x = x * z * tl.sigmoid(z)
    if RMS:
        xc = x
    else:
        mean = tl.sum(x, axis=1) / N
        xc = tl.where(mask, x - mean[:, None], 0.0)  # padded columns stay out of the variance
        tl.store(MEAN + rows, mean, mask=row_ok)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)
    tl.store(RSTD + rows, rstd, mask=row_ok)
    w = _param(W, cols, col_ok, 1.0, BLOCK_N)
    b = _param(B, cols, col_ok, 0.0, BLOCK_N)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    if Z is not None and not GATE_FIRST:
        y = y * z * tl.sigmoid(z)
    tl.store(Y + rows[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _norm_bwd_kernel(X, Z, W, B, DY, DS, DS_AT, MEAN, RSTD, SEED, S1, PW, PMEAN, PRSTD, DX, DR, DZ, DW, DB, DPW, DPB,
                     M, H, N, x_s0, x_s1, z_s0, z_s1, dy_s0, dy_s1, p, scale, tiles_per_program, RMS: tl.constexpr,
                     GATE_FIRST: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = _param(W, cols, col_ok, 1.0, BLOCK_N)
    b = _param(B, cols, col_ok, 0.0, BLOCK_N)
    # per element, summed over the tile's rows once at the end: a column sum in every tile would cost two
    # cross-warp reductions (shared memory and barriers) per tile
    dw = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    db = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    if S1 is not None:
        pw = _param(PW, cols, col_ok, 1.0, BLOCK_N)
        dpw = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
        dpb = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
    for i in range(tiles_per_program):
        rows = ((pid * tiles_per_program + i) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        x = tl.load(X + _offsets(rows, cols, H, x_s0, x_s1), mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        if Z is not None:
            z = tl.load(Z + _offsets(rows, cols, H, z_s0, z_s1), mask=mask, other=0.0).to(tl.float32)
            sig = tl.sigmoid(z)
            if GATE_FIRST:  # the norm's input is x * silu(z)
                x_in = x
                x = x_in * z * sig
        if RMS:
            xhat = x * rstd[:, None]
        else:
            mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        dy = tl.load(DY + _offsets(rows, cols, H, dy_s0, dy_s1), mask=mask, other=0.0).to(tl.float32)
        if Z is not None and not GATE_FIRST:  # y = a * silu(z) with a = xhat * w + b: dz from a, then dy becomes da
            a = xhat * w[None, :] + b[None, :]
            if DZ is not None:
                dz = dy * a * sig * (1 + z * (1 - sig))
                tl.store(DZ + rows[:, None] * N + cols[None, :], dz.to(DZ.dtype.element_ty), mask=mask)
            dy = dy * z * sig
        dw += dy * xhat
        db += dy
        g = dy * w[None, :]  # the gradient with respect to xhat
        # dx = rstd (g - mean(g) - xhat mean(g xhat)); RMSNorm has no centring, so no mean(g) term
        gx = tl.sum(g * xhat, axis=1) / N
        if RMS:
            dx = (g - xhat * gx[:, None]) * rstd[:, None]
        else:
            dx = (g - (tl.sum(g, axis=1) / N)[:, None] - xhat * gx[:, None]) * rstd[:, None]
        if Z is not None and GATE_FIRST:  # through x * silu(z): dz from x, then dx scaled by silu(z)
            if DZ is not None:
                dz = dx * x_in * sig * (1 + z * (1 - sig))
                tl.store(DZ + rows[:, None] * N + cols[None, :], dz.to(DZ.dtype.element_ty), mask=mask)
            dx = dx * z * sig
        if DS is not None:  # the sum's own gradient (its later uses) joins the norm's
            if DS_AT is None:
                dx += tl.load(DS + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            else:  # given at some rows alone: each row's index among them, or -1
                at = tl.load(DS_AT + rows, mask=row_ok, other=-1).to(tl.int64)
                dx += tl.load(DS + at[:, None] * N + cols[None, :], mask=mask & (at >= 0)[:, None],
                              other=0.0).to(tl.float32)
        if SEED is not None:  # back through the embedding's dropout: the same mask drawn again
            dx = tl.where(kept_by_dropout(SEED, rows, cols, N, p), dx * scale, 0.0)
        if S1 is not None:  # back through s = s1 + pre(s1): the pre norm's input gradient joins the pass-through
            dx = dx.to(S1.dtype.element_ty).to(tl.float32)  # s's gradient as written apart, in s1's dtype
            s1 = tl.load(S1 + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            pmean = tl.load(PMEAN + rows, mask=row_ok, other=0.0)
            prstd = tl.load(PRSTD + rows, mask=row_ok, other=0.0)
            pxhat = tl.where(mask, (s1 - pmean[:, None]) * prstd[:, None], 0.0)
            dpw += dx * pxhat
            dpb += dx
            pg = dx * pw[None, :]
            pgx = tl.sum(pg * pxhat, axis=1) / N
            dx = (pg - (tl.sum(pg, axis=1) / N)[:, None] - pxhat * pgx[:, None]) * prstd[:, None] + dx
        tl.store(DX + rows[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        if DR is not None:  # the same gradient for r, in r's dtype
            tl.store(DR + rows[:, None] * N + cols[None, :], dx.to(DR.dtype.element_ty), mask=mask)
    if DW is not None:
        tl.store(DW + pid * N + cols, tl.sum(dw, axis=0), mask=col_ok)
    if DB is not None:
        tl.store(DB + pid * N + cols, tl.sum(db, axis=0), mask=col_ok)
    if DPW is not None:
        tl.store(DPW + pid * N + cols, tl.sum(dpw, axis=0), mask=col_ok)
    if DPB is not None:
        tl.store(DPB + pid * N + cols, tl.sum(dpb, axis=0), mask=col_ok)


def _tile(N: int) -> tuple[int, int]:
    """(ROWS, BLOCK_N) of a tile for rows of N values."""
    block_n = triton.next_power_of_2(N)
    return max(1, TILE // block_n), block_n


def _rows(t: torch.Tensor, H: int) -> torch.Tensor:
    """t [..., N] as [M / H, H, N] with a unit column stride: a view where one exists, else a copy."""
    t = t.reshape(-1, H, t.shape[-1])
    return t if t.stride(-1) == 1 else t.contiguous()


class _Norm(torch.autograd.Function):
    """y = norm(x) (times silu(gate)); with an update r, the norm of s = x + r, returning (s, y). With ``ids`` x is a
    table [V, N] and its rows at ids take x's place (s = x[ids] (+ r), returned with y): an embedding gathered by
    the norm that reads it, its weight gradient summed from the rows' (``embedding.sorted_sum``), and with ``dropout``
    p > 0 the gathered rows (+ r) go through dropout before the norm: s = dropout(x[ids] + r). With ``pre_eps`` (and
    an update) a LayerNorm ``pre`` (pre_weight, pre_bias) comes between the add and the norm's input: s1 = x + r, s
    = s1 + pre(s1) (Zoology's block with its Identity state mixer, its norm2 and the next block's norm1 in one pass)."""

    @staticmethod
    def forward(ctx, x, update, weight, bias, gate, eps, rms, out_dtype, return_sum, gate_first, picked_rows, ids,
                dropout, pre_weight, pre_bias, pre_eps):
        ctx.set_materialize_grads(False)
        N = x.shape[-1]
        shape = x.shape if ids is None else (*ids.shape, N)
        H = shape[-2] if len(shape) >= 3 else 1
        x3 = _rows(x, H) if ids is None else last_dim_contiguous(x)
        r3 = None if update is None else _rows(update.expand(shape), H)  # a broadcast update: stride 0 rows
        z3 = None if gate is None else _rows(gate, H)
        M = x3.shape[0] * H if ids is None else ids.numel()
        rows, block_n = _tile(N)
        y = torch.empty(shape, dtype=out_dtype, device=x.device)
        total = None if update is None and ids is None else torch.empty(
            shape, dtype=x.dtype if update is None else torch.promote_types(x.dtype, update.dtype), device=x.device)
        mean = None if rms else torch.empty(M, dtype=torch.float32, device=x.device)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        r_s0, r_s1 = (0, 0) if r3 is None else r3.stride()[:2]
        z_s0, z_s1 = (0, 0) if z3 is None else z3.stride()[:2]
        # a device tensor drawn from PyTorch's generator, as embedding_dropout's: a CUDA graph replays with a new one
        seed = torch.randint(2 ** 31 - 1, (1,), device=x.device, dtype=torch.int64) if dropout else None
        pre = pre_eps is not None
        s1 = torch.empty_like(total) if pre else None
        pmean, prstd = (torch.empty(M, dtype=torch.float32, device=x.device) for _ in range(2)) if pre else (None, None)
        _norm_fwd_kernel[(max(1, triton.cdiv(M, rows)),)](
            x3, None if ids is None else ids.reshape(-1), r3, z3, weight, bias, total, y, mean, rstd, seed, s1,
            pre_weight, pre_bias, pmean, prstd, M, H, N, x3.stride(0), x3.stride(1) if ids is None else 0, r_s0, r_s1,
            z_s0, z_s1, eps, dropout, 1.0 / (1.0 - dropout), pre_eps or 0.0, RMS=rms, GATE_FIRST=gate_first,
            ROWS=rows, BLOCK_N=block_n, num_warps=NUM_WARPS)
        normed = x3 if total is None else total.view(-1, H, N)  # what the backward's xhat comes from
        ctx.save_for_backward(normed, z3, weight, bias, mean, rstd, ids, seed, s1, pre_weight, pre_bias, pmean, prstd)
        ctx.shape, ctx.rms, ctx.gate_first, ctx.dropout = shape, rms, gate_first, dropout
        ctx.dtypes = x.dtype, None if update is None else update.dtype
        ctx.update_shape = None if update is None else update.shape
        ctx.table_rows = None if ids is None else x.shape[0]
        if picked_rows is None:
            ctx.picked = None
            return (total, y) if return_sum or ids is not None else y
        # the picked rows' indices among the [M, N] rows of the sum
        ctx.picked = (picked_rows + torch.arange(0, M, shape[1], device=x.device)[:, None]).flatten()
        return total.view(M, N)[ctx.picked].view(*picked_rows.shape, N), y

    @staticmethod
    def backward(ctx, *grads):
        ds, dy = grads if len(grads) == 2 else (None, grads[0])
        x3, z3, weight, bias, mean, rstd, ids, seed, s1, pre_weight, pre_bias, pmean, prstd = ctx.saved_tensors
        M, H, N = x3.shape[0] * x3.shape[1], x3.shape[1], x3.shape[2]
        if dy is None and (seed is not None or s1 is not None):  # only the sum was used: its gradient still goes
            dy = torch.zeros(ctx.shape, dtype=torch.float32, device=x3.device)  # through the mask or the pre norm
        if dy is None:  # only the sum was used: its gradient passes through to x and update
            if ctx.picked is not None:
                ds = ds.new_zeros(M, N).index_copy_(0, ctx.picked, ds.reshape(-1, N)).view(ctx.shape)
            dr = _update_grad(ds.to(ctx.dtypes[1]), ctx.update_shape) if ctx.needs_input_grad[1] else None
            dx = _table_grad(ctx, ds.to(ctx.dtypes[0]), ids)
            return dx, dr, *[None] * 14
        rows, block_n = _tile(N)
        tiles = max(1, triton.cdiv(M, rows))
        per_program, programs = even_walks(tiles, resident_programs(x3.device))
        dy3 = _rows(dy, H)
        ds = None if ds is None else ds.contiguous()
        ds_at = None
        if ds is not None and ctx.picked is not None:  # each row's index among the picked rows, or -1
            ds_at = torch.full((M,), -1, dtype=torch.int32, device=x3.device)
            ds_at[ctx.picked] = torch.arange(ctx.picked.numel(), dtype=torch.int32, device=x3.device)
        x_dtype, r_dtype = ctx.dtypes
        dx = torch.empty(ctx.shape, dtype=x_dtype, device=x3.device)
        # a broadcast update's gradient is x's summed: written apart only where x's dtype would round it
        dr = None
        if ctx.needs_input_grad[1] and (ctx.update_shape == ctx.shape or r_dtype != x_dtype):
            dr = torch.empty(ctx.shape, dtype=r_dtype, device=x3.device)
        dz = torch.empty(ctx.shape, dtype=z3.dtype, device=x3.device) if ctx.needs_input_grad[4] else None
        # the weights' and the biases' per-program partial sums in one buffer, so that one column sum finishes all
        params = {2: weight, 3: bias, 13: pre_weight, 14: pre_bias}
        wanted = [i for i in params if ctx.needs_input_grad[i]]
        partial = torch.empty(len(wanted), programs, N, dtype=torch.float32, device=x3.device)
        dw, db, dpw, dpb = (partial[wanted.index(i)] if i in wanted else None for i in params)
        z_s0, z_s1 = (0, 0) if z3 is None else z3.stride()[:2]
        _norm_bwd_kernel[(programs,)](
            x3, z3, weight, bias, dy3, ds, ds_at, mean, rstd, seed, s1, pre_weight, pmean, prstd, dx, dr, dz, dw, db,
            dpw, dpb, M, H, N, x3.stride(0), x3.stride(1), z_s0, z_s1, dy3.stride(0), dy3.stride(1), ctx.dropout,
            1.0 / (1.0 - ctx.dropout), per_program, RMS=ctx.rms, GATE_FIRST=ctx.gate_first, ROWS=rows, BLOCK_N=block_n,
            num_warps=NUM_WARPS)
        sums = sum_rows(partial) if wanted else None
        dw, db, dpw, dpb = (sums[wanted.index(i)].to(p.dtype) if i in wanted else None for i, p in params.items())
        if ctx.needs_input_grad[1]:
            dr = _update_grad(dx if dr is None else dr, ctx.update_shape).to(r_dtype)
        return _table_grad(ctx, dx, ids), dr, dw, db, dz, *[None] * 8, dpw, dpb, None


def _table_grad(ctx, dx: torch.Tensor, ids: torch.Tensor | None) -> torch.Tensor | None:
    """x's gradient: dx itself, or where x is a table read at ids, dx's rows summed into the table's rows."""
    if ids is None:
        return dx
    if not ctx.needs_input_grad[0]:
        return None
    from zoo.kernels.embedding.sorted_sum import embedding_backward
    return embedding_backward(dx, ids, ctx.table_rows, ctx.dtypes[0])


def _update_grad(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The gradient of an update of ``shape`` added to every row group of the sum: ``grad`` (the sum's shape) itself,
    or for a broadcast update its deterministic column sum over the dims broadcast over (float32; the positions of
    MQAR's figure-2 cell: [256, 32768] summed over 256 sequences, where autograd's sum of the expanded update's
    gradient took a PyTorch reduction and a [256, 256, 128] float32 gradient written for it)."""
    if grad.shape == shape:
        return grad
    rows = grad.reshape(-1, shape.numel())
    return column_sum(last_dim_contiguous(rows)).view(shape)


# Opaque to torch.compile: Inductor has nothing to fuse into a hand-written kernel (and failed on other Triton
# kernels of zoo: GatedFWA's, H100, torch 2.11, Triton 3.6).
@not_compiled
def norm_triton(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, gate: torch.Tensor | None,
                eps: float, rms: bool, out_dtype: torch.dtype, gate_first: bool = False) -> torch.Tensor:
    """RMSNorm (``rms``, no bias) or LayerNorm of x [..., N] over N, times weight [N], plus bias [N], times
    silu(gate) [..., N], or with ``gate_first`` of x * silu(gate); each of weight, bias, gate may be None. Float32
    math; y [..., N] in ``out_dtype``."""
    return _Norm.apply(x, None, weight, bias, gate, eps, rms, out_dtype, False, gate_first, None, None, 0.0, None, None,
                       None)


@not_compiled
def add_norm_triton(x: torch.Tensor, update: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                    eps: float, rms: bool, out_dtype: torch.dtype, rows: torch.Tensor | None = None,
                    pre: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, norm(s)) with s = x + update [..., N] in their promoted dtype, in one pass: the residual add of a
    pre-norm block fused into the norm after it. The backward adds s's own gradient to the norm's in the same
    pass and writes it twice, for x and for update, in their dtypes. With ``rows`` [B, K] (x [B, L, N]) s is
    returned at those rows of each sequence alone, [B, K, N], and their gradient is added in the same pass, each
    row where it belongs (the rows of a sequence distinct). ``pre`` (pre_weight, pre_bias, pre_eps): a LayerNorm
    between the add and the norm, s1 = x + update and s = s1 + pre(s1) (the pre norm's output in s1's dtype)."""
    return _Norm.apply(x, update, weight, bias, None, eps, rms, out_dtype, True, False, rows, None, 0.0,
                       *(pre or (None, None, None)))


@not_compiled
def embed_norm_triton(ids: torch.Tensor, table: torch.Tensor, update: torch.Tensor | None, weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float, out_dtype: torch.dtype,
                      rows: torch.Tensor | None = None, dropout: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, layer_norm(s)) with s = table[ids] (+ update) [..., N] in one pass: a model's embedding gathered by the
    first block's norm, which writes the stream s and reads no gathered copy of the rows. Backward, the norm's
    input gradient is summed into the table's rows (``embedding.sorted_sum``: deterministic). ``rows`` as
    :func:`add_norm_triton`'s. ``dropout`` p > 0: s = dropout(table[ids] + update), the mask that of
    ``embedding.dropout`` with the same seed (drawn from a flat index: ids.numel() * N < 2 ** 31)."""
    return _Norm.apply(table, update, weight, bias, None, eps, False, out_dtype, True, False, rows, ids, dropout, None,
                       None, None)
