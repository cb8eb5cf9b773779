"""A projection read as per-head parts (attention's q, k, v), whose parts' gradients are packed and bias-summed in one
Triton pass over them.

Why: softmax attention projects x [B, L, D] to q, k, v as views of one [B, L, 3D] output. Backward, autograd
concatenates their three gradients (each [B, L, H, Dh], in practice views of the contiguous [B, H, L, Dh] tensors
cuDNN's SDPA backward writes) into one [B, L, 3D] tensor, a copy kernel of 32 us a call on an H100 at B=256, L=256,
D=128; the bias gradient's column sum (``partial_sums.column_sum``) then reads that whole tensor again, about 17 us
more. Here one kernel reads each part's gradient with its own strides (up to three parts a launch), writes its
columns of the packed [M, 3D] gradient (M = B * L) the matmul gradients read, and adds them up for the bias as it
goes: a fixed set of programs, each a contiguous run of rows and one block of columns, stores its sums in one row of
a float32 [programs, N] partial, which ``sum_rows`` finishes. No atomics, so the gradient is the same on every
run; it is summed in float32 and rounded to the bias's dtype once, as ``column_sum``'s. A part without a gradient
(not used by the loss) is written as zeros, with no tensor of zeros read. Where the gradients come as the views of
one packed tensor already (zoo's own window attention writes dq, dk, dv into one [B, L, 3, H, Dh] tensor when q, k,
v are views of one), nothing is copied: the pass is ``column_sum``'s, a read.

The model's last block needs its queries at the labelled rows alone (``rows``: the first part gathered at them).
Picked after the projection, their gradient would come back as a zero-filled [B, L, heads, Dh] tensor with the rows
scattered into it, written and then read by the pack; here the pack reads the [B, K, heads, Dh] gradient where each
row belongs (a [B * L] int32 map of source rows, -1 for the rows left out, written zeros). Like the layer norm's
``rows``, they must be distinct in each sequence: a repeated row's gradient would be counted once. In softmax's
training step at the figure-2 cell (one H100 80GB, ``python -m zoo.bench.profile``) the two layers' packs then took
75 us a step together, against 93 when each part had its own launch and the queries came zero-filled.

Everything else is ``F.linear``'s, as in ``fused.py``: the forward (``forward.project``; the parts are views of its
one output), the input and weight gradients as matmuls of the packed gradient, in autocast's dtype when autocast is
on, returned in the dtypes of x and weight (``grads.weight_grad`` for a float32 weight under 16-bit autocast on a GPU).

Shapes: x [B, L, K], weight [N, K], bias [N] or None, N = parts * heads * Dh, rows [B, K'] int64 or None ->
``parts`` tensors [B, L, heads, Dh], views of one [B, L, parts, heads, Dh] projection (the first [B, K', heads, Dh],
gathered, with ``rows``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.backend import not_compiled
from zoo.kernels.linear.forward import project
from zoo.kernels.linear.grads import weight_grad
from zoo.kernels.layout import packed_base
from zoo.kernels.partial_sums import NUM_WARPS, column_sum, column_walk, sum_rows
from zoo.kernels.rows import rows_at


PARTS_A_LAUNCH = 3  # attention's q, k and v in one launch (more parts take more launches)


@triton.jit
def _pack_part(G, s0, s1, s2, s3, OUT, PARTIAL, SOURCE, M, L, N, WIDTH, rows_per_program, ZERO: tl.constexpr,
               AT_ROWS: tl.constexpr, SUMS: tl.constexpr, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """This program's rows and block of columns of one part: G [B, L, heads, HEAD_DIM] (strides s0..s3) into its
    WIDTH columns of OUT [M, N] (OUT and PARTIAL point at the part's first column), and their column sums into this
    program's row of PARTIAL where SUMS. A ZERO part (no gradient) reads nothing and writes zeros. An AT_ROWS part's G
    is [B, K, heads, HEAD_DIM], its rows only: SOURCE [M] int32 gives each row of OUT its row of G, or -1 for zeros."""
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < WIDTH
    col_offsets = (cols // HEAD_DIM) * s2 + (cols % HEAD_DIM) * s3
    first = tl.program_id(0).to(tl.int64) * rows_per_program
    acc = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)  # ROWS independent sums per column: loads stay in flight
    for start in range(0, rows_per_program, ROWS):
        rows = first + start + tl.arange(0, ROWS)
        mask = (rows < M)[:, None] & col_ok[None, :]
        if ZERO:
            g = tl.zeros([ROWS, BLOCK_N], dtype=OUT.dtype.element_ty)
        else:
            if AT_ROWS:
                source = tl.load(SOURCE + rows, mask=rows < M, other=-1)
                row_offsets = (rows // L) * s0 + source * s1
                mask_in = mask & (source >= 0)[:, None]
            else:
                row_offsets = (rows // L) * s0 + (rows % L) * s1
                mask_in = mask
            g = tl.load(G + row_offsets[:, None] + col_offsets[None, :], mask=mask_in, other=0.0)
            g = g.to(OUT.dtype.element_ty)
        tl.store(OUT + rows[:, None] * N + cols[None, :], g, mask=mask)
        if SUMS:
            acc += g.to(tl.float32)  # the values stored: the bias gradient of the gradient the matmuls read
    if SUMS:
        tl.store(PARTIAL + tl.program_id(0) * N + cols, tl.sum(acc, axis=0), mask=col_ok)


@triton.jit
def _pack_column_sum_kernel(G0, G1, G2, OUT, PARTIAL, SOURCE, M, L, N, WIDTH, a0, a1, a2, a3, b0, b1, b2, b3, c0, c1,
                            c2, c3, rows_per_program, ZEROS: tl.constexpr, FIRST_AT_ROWS: tl.constexpr,
                            SUMS: tl.constexpr, HEAD_DIM: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    # up to three parts on a (row runs, column blocks, parts) grid, each with its pointer and strides (bit i of ZEROS:
    # part i has no gradient; FIRST_AT_ROWS: part 0's is given at SOURCE's rows); OUT and PARTIAL point at the first
    # part's first column
    part = tl.program_id(2)
    if part == 0:
        _pack_part(G0, a0, a1, a2, a3, OUT, PARTIAL, SOURCE, M, L, N, WIDTH, rows_per_program, ZEROS & 1,
                   FIRST_AT_ROWS, SUMS, HEAD_DIM, ROWS, BLOCK_N)
    elif part == 1:
        _pack_part(G1, b0, b1, b2, b3, OUT + WIDTH, PARTIAL + WIDTH, SOURCE, M, L, N, WIDTH, rows_per_program,
                   (ZEROS >> 1) & 1, False, SUMS, HEAD_DIM, ROWS, BLOCK_N)
    else:
        _pack_part(G2, c0, c1, c2, c3, OUT + 2 * WIDTH, PARTIAL + 2 * WIDTH, SOURCE, M, L, N, WIDTH, rows_per_program,
                   (ZEROS >> 2) & 1, False, SUMS, HEAD_DIM, ROWS, BLOCK_N)


def source_rows(rows: torch.Tensor, L: int) -> torch.Tensor:
    """rows [B, K] (distinct in each sequence, each in [0, L)) -> [B * L] int32: for each row of the B sequences of
    length L its index among ``rows``, or -1 where it is not one of them."""
    B, K = rows.shape
    source = torch.full((B, L), -1, dtype=torch.int32, device=rows.device)
    source.scatter_(1, rows, torch.arange(K, dtype=torch.int32, device=rows.device).expand(B, K))
    return source.view(-1)


def pack_grads(grads, shape: tuple[int, int, int, int], dtype: torch.dtype, sums: bool,
               first_rows: torch.Tensor | None = None):
    """The parts' gradients (each [B, L, heads, Dh] of ``shape``, any strides, or None for zeros) side by side as
    one contiguous [B * L, parts * heads * Dh] tensor in ``dtype``, and (``sums``) its float32 column sums [N], else
    None. With ``first_rows`` [B, K] the first part's gradient is [B, K, heads, Dh], at those rows alone (the others
    zeros). Up to ``PARTS_A_LAUNCH`` parts a launch, all writing one partial for one row sum. Gradients that are
    already the views of one packed tensor in order (``layout.packed_base``: zoo's window attention writes them so
    for q, k, v given that way) are that tensor, summed by ``column_sum``: no copy."""
    B, L, heads, head_dim = shape
    width = heads * head_dim
    M, N = B * L, len(grads) * width
    base = packed_base(grads) if first_rows is None else None
    if base is not None and base.dtype == dtype:  # already packed where they lie (a kernel wrote them so): no copy
        out = base.view(M, N)
        return out, column_sum(out) if sums else None
    device = next(g for g in grads if g is not None).device
    out = torch.empty(M, N, dtype=dtype, device=device)
    if M == 0:
        return out, torch.zeros(N, dtype=torch.float32, device=device) if sums else None
    programs, column_blocks, per_program, rows, block_n = column_walk(M, width, device)  # as a column sum walks
    partial = torch.empty(programs, N, dtype=torch.float32, device=device) if sums else out
    at_rows = first_rows is not None and grads[0] is not None
    source = source_rows(first_rows, L) if at_rows else out  # out: a pointer never read
    for first in range(0, len(grads), PARTS_A_LAUNCH):
        group = grads[first:first + PARTS_A_LAUNCH]
        # a part without a gradient is never read (the output stands in for its pointer), nor is a missing one
        pointers = [out if g is None else g for g in group] + [out] * (PARTS_A_LAUNCH - len(group))
        strides = [s for g in group for s in ((0,) * 4 if g is None else g.stride())]
        strides += [0] * (4 * PARTS_A_LAUNCH - len(strides))
        zeros = sum(1 << i for i, g in enumerate(group) if g is None)
        _pack_column_sum_kernel[(programs, column_blocks, len(group))](
            *pointers, out[:, first * width:], partial[:, first * width:], source, M, L, N, width, *strides,
            per_program, ZEROS=zeros, FIRST_AT_ROWS=at_rows and first == 0, SUMS=sums, HEAD_DIM=head_dim, ROWS=rows,
            BLOCK_N=block_n, num_warps=NUM_WARPS)
    return out, sum_rows(partial) if sums else None


class _HeadParts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, parts, heads, rows, dtype):
        xc, wc = (x, weight) if dtype is None else (x.to(dtype), weight.to(dtype))
        bc = bias if bias is None or dtype is None else bias.to(dtype)
        ctx.set_materialize_grads(False)  # an unused part's gradient comes as None: written as zeros, never read
        ctx.save_for_backward(xc if ctx.needs_input_grad[1] else None, wc if ctx.needs_input_grad[0] else None, rows)
        ctx.dtypes = x.dtype, weight.dtype, None if bias is None else bias.dtype
        B, L, _ = x.shape
        y = project(xc, wc, bc)
        ctx.shape, ctx.out_dtype = (B, L, heads, weight.shape[0] // (parts * heads)), y.dtype
        outs = y.view(B, L, parts, *ctx.shape[2:]).unbind(2)
        return outs if rows is None else (rows_at(outs[0], rows), *outs[1:])

    @staticmethod
    def backward(ctx, *grads):
        if all(g is None for g in grads):
            return (None,) * 7
        xc, wc, rows = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        sums = b_dtype is not None and ctx.needs_input_grad[2]
        exact = ctx.out_dtype == torch.float64  # PyTorch's float64 sum, which the float32 partial sums would round
        packed, db = pack_grads(grads, ctx.shape, ctx.out_dtype, sums and not exact, rows)
        if sums and exact:
            db = packed.sum(0)
        dx = (packed @ wc).view(*ctx.shape[:2], -1).to(x_dtype) if ctx.needs_input_grad[0] else None
        dw = weight_grad(packed, xc.reshape(-1, xc.shape[-1]), w_dtype) if ctx.needs_input_grad[1] else None
        return dx, dw, db.to(b_dtype) if sums else None, None, None, None, None


# Opaque to torch.compile: Inductor has nothing to fuse into a hand-written kernel.
@not_compiled
def head_parts_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, parts: int, heads: int,
                      rows: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """x [B, L, K] @ weight [N, K]^T + bias [N] (or None) as ``parts`` views [B, L, heads, Dh] of the [B, L, parts,
    heads, Dh] output, the first one at ``rows`` [B, K'] alone where given ([B, K', heads, Dh], gathered); under
    autocast (on x's device type) the inputs are cast to its dtype first, as ``F.linear``'s are. Backward, the parts'
    gradients are packed and summed for the bias in one pass (:func:`pack_grads`; the first part's rows are read where
    they belong, with no zero-filled gradient scattered first)."""
    return _HeadParts.apply(x, weight, bias, parts, heads, rows, matmul_dtype(x))
