"""Rows of [B, L, ...] tensors at per-sequence positions: a training step's labelled rows.

Plain PyTorch, imported by the model and the mixers on every machine (no Triton: a CPU install has none).

The gather's gradient puts the K rows back into a zero [B, L, ...] tensor. PyTorch's (``scatter_add``) adds every
element with an atomic add, which is slow in 16 bits on a GPU: 215 us a call for Mamba's [128, 64, 1024] bf16 rows
of the grid's largest cell on an H200, against 56 us for the gather itself (``results/SPEED.md``). There, for up to
``ONE_HOT_ROWS`` rows, the gradient is one batched matmul instead: a [B, L, K] one-hot of the positions times the
[B, K, F] gradient, which writes every row of the result once, zeros included, adds repeated positions inside the
matmul in float32, and needs no atomics (the same bits on every run; a position that occurs once gets its gradient
row exactly).
"""
from __future__ import annotations

import torch

# The most rows a sequence's one-hot gradient takes: its matmul does 2 K flops per element written, which stays
# below the time of writing them while K is a small multiple of the GPU's flops per byte of memory traffic.
ONE_HOT_ROWS = 64
SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def _index(positions: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``positions`` [B, K] expanded to gather rows of a tensor of ``shape`` [B, L, ...] along dim 1."""
    return positions.view(*positions.shape, *(1,) * (len(shape) - 2)).expand(*positions.shape, *shape[2:])


class _RowsAt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, positions):
        ctx.save_for_backward(positions)
        ctx.x_shape = x.shape
        return x.gather(1, _index(positions, x.shape))

    @staticmethod
    def backward(ctx, g):
        positions, = ctx.saved_tensors
        shape = ctx.x_shape
        if g.is_cuda and g.dtype in SIXTEEN_BIT and positions.shape[1] <= ONE_HOT_ROWS:
            return rows_back_by_matmul(g, positions, shape), None
        return g.new_zeros(shape).scatter_add_(1, _index(positions, shape), g), None


def rows_back_by_matmul(g: torch.Tensor, positions: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The gradient of ``rows_at`` as one batched matmul: g [B, K, ...] put back at ``positions`` [B, K] of a zero
    tensor of ``shape`` [B, L, ...], repeated positions summed. A non-finite entry of g spreads down its column
    (0 * inf), where the scatter keeps it in its row: only a diverged run has one."""
    B, L, K = shape[0], shape[1], positions.shape[1]
    one_hot = (torch.arange(L, device=g.device)[None, :, None] == positions[:, None, :]).to(g.dtype)
    return torch.bmm(one_hot, g.reshape(B, K, -1)).view(shape)


def rows_at(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x [B, L, ...] at ``positions`` [B, K] (int64, each in [0, L); repeats allowed) -> [B, K, ...]: a gather along
    dim 1, whose gradient sums the rows of repeated positions."""
    return _RowsAt.apply(x, positions)
