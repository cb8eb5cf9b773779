"""The embedding, the learned positions and dropout in one Triton pass each way.

Why: a model with embedding dropout (Zoology's ``embed_dropout: 0.1``, zoo's default) computed ``dropout(E[ids] +
P)`` as a gather, an add and PyTorch's dropout: at MQAR's figure-2 cell ([256, 256, 128] float32 rows) about 170 MB
written and read forward (the gather's rows, the sum, the dropout's output and its mask) and, backward, dropout's
gradient pass, autograd's sum of it over the batch for the positions (a PyTorch reduction) and the embedding's. Here
the forward gathers each row, adds its position, draws its dropout mask from a counter-based generator
(``tl.rand``: Philox of a seed and the element's index) and writes the result once; the mask is never stored. The
backward draws the same mask again from the saved seed, writes the masked, scaled gradient once, and hands it to
the embedding's deterministic weight gradient (``sorted_sum.embedding_backward``) and to a column sum over the
batch for the positions.

The seed is a device tensor drawn from PyTorch's generator (``torch.randint``), so the numbers follow
``torch.manual_seed`` and a CUDA graph replays with a new seed each time. The kept values are PyTorch's to the bit
(float32 add, then the multiply by 1 / (1 - p)); which values are kept differs from ``F.dropout``'s draw, with the
same probability of keeping each.

Shapes: ids [B, L] int64, weight [V, D], positions [L, D] or None -> [B, L, D] in weight's dtype.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.backend import not_compiled
from zoo.kernels.embedding.sorted_sum import embedding_backward
from zoo.kernels.partial_sums import column_sum

TILE = 4096  # values a program handles: 16 per thread with 8 warps
NUM_WARPS = 8


@triton.jit
def kept_by_dropout(SEED, rows, cols, D, p):
    """Whether dropout keeps each element of the [ROWS, BLOCK_D] tile: a uniform draw of the element's flat index
    with the saved seed, at least p."""
    return tl.rand(tl.load(SEED), (rows[:, None] * D + cols[None, :]).to(tl.int32)) >= p


@triton.jit
def _embedding_dropout_fwd_kernel(IDS, W, POS, SEED, OUT, M, L, D, p, scale, ROWS: tl.constexpr,
                                  BLOCK_D: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows < M)[:, None] & (cols < D)[None, :]
    ids = tl.load(IDS + rows, mask=rows < M, other=0)
    x = tl.load(W + ids[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if POS is not None:
        x += tl.load(POS + (rows % L)[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x = tl.where(kept_by_dropout(SEED, rows, cols, D, p), x * scale, 0.0)
    tl.store(OUT + rows[:, None] * D + cols[None, :], x.to(OUT.dtype.element_ty), mask=mask)


@triton.jit
def _embedding_dropout_bwd_kernel(DY, SEED, DX, M, D, p, scale, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows < M)[:, None] & (cols < D)[None, :]
    dy = tl.load(DY + rows[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dx = tl.where(kept_by_dropout(SEED, rows, cols, D, p), dy * scale, 0.0)
    tl.store(DX + rows[:, None] * D + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)


def _grid(M: int, D: int) -> tuple[tuple[int], dict]:
    block_d = triton.next_power_of_2(D)
    rows = max(1, TILE // block_d)
    return (triton.cdiv(M, rows),), dict(ROWS=rows, BLOCK_D=block_d, num_warps=NUM_WARPS)


class _EmbeddingDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight, positions, p):
        B, L = ids.shape
        V, D = weight.shape
        seed = torch.randint(2 ** 31 - 1, (1,), device=ids.device, dtype=torch.int64)
        out = torch.empty(B, L, D, dtype=weight.dtype, device=weight.device)
        grid, launch = _grid(B * L, D)
        _embedding_dropout_fwd_kernel[grid](ids, weight, positions, seed, out, B * L, L, D, p, 1.0 / (1.0 - p),
                                            **launch)
        ctx.save_for_backward(ids, seed)
        ctx.p, ctx.V, ctx.dtype = p, V, weight.dtype
        ctx.positions_dtype = None if positions is None else positions.dtype
        return out

    @staticmethod
    def backward(ctx, dy):
        ids, seed = ctx.saved_tensors
        B, L, D = dy.shape
        dx = torch.empty(B, L, D, dtype=torch.promote_types(dy.dtype, torch.float32), device=dy.device)
        grid, launch = _grid(B * L, D)
        _embedding_dropout_bwd_kernel[grid](dy.contiguous(), seed, dx, B * L, D, ctx.p, 1.0 / (1.0 - ctx.p), **launch)
        dw = embedding_backward(dx, ids, ctx.V, ctx.dtype) if ctx.needs_input_grad[1] else None
        dpos = None
        if ctx.positions_dtype is not None and ctx.needs_input_grad[2]:
            dpos = column_sum(dx.view(B, L * D)).view(L, D).to(ctx.positions_dtype)
        return None, dw, dpos, None


# Opaque to torch.compile: Inductor has nothing to fuse into a hand-written kernel.
@not_compiled
def embedding_dropout(ids: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor | None,
                      p: float) -> torch.Tensor:
    """dropout(weight[ids] + positions, p) for ids [B, L], weight [V, D], positions [L, D] (or None) -> [B, L, D] in
    weight's dtype, in training (every value dropped with probability p, the rest scaled by 1 / (1 - p))."""
    return _EmbeddingDropout.apply(ids, weight, positions, p)
