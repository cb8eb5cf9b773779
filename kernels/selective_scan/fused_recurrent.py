"""Triton selective scan: one program per (batch, block of channels) keeps its (BLOCK_D, N) state on chip
and walks time inside the kernel. Forward also writes every state h_t (float32) for the backward, which
walks time in reverse carrying dL/dh_t. B and C are shared by all channels, so each program writes its
partial dB, dC (and dA) and the wrapper sums them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _scan_fwd_kernel(u_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, y_ptr, h_ptr, L, D,
                     N: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    n = tl.arange(0, N)
    dmask = d < D
    A = tl.load(A_ptr + d[:, None] * N + n[None, :], mask=dmask[:, None], other=0.0)
    h = tl.zeros([BLOCK_D, N], dtype=tl.float32)
    for t in range(L):
        row = (b * L + t) * D + d
        ut = tl.load(u_ptr + row, mask=dmask, other=0.0)
        dtt = tl.load(dt_ptr + row, mask=dmask, other=0.0)
        Bt = tl.load(B_ptr + (b * L + t) * N + n)
        Ct = tl.load(C_ptr + (b * L + t) * N + n)
        h = tl.exp(dtt[:, None] * A) * h + (dtt * ut)[:, None] * Bt[None, :]
        tl.store(y_ptr + row, tl.sum(h * Ct[None, :], axis=1), mask=dmask)
        tl.store(h_ptr + row[:, None] * N + n[None, :], h, mask=dmask[:, None])


@triton.jit
def _scan_bwd_kernel(u_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, h_ptr, gy_ptr, gu_ptr, gdt_ptr, gA_ptr, gB_ptr, gC_ptr,
                     L, D, Bsz, N: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    pd = tl.program_id(1)
    d = pd * BLOCK_D + tl.arange(0, BLOCK_D)
    n = tl.arange(0, N)
    dmask = d < D
    A = tl.load(A_ptr + d[:, None] * N + n[None, :], mask=dmask[:, None], other=0.0)
    gh = tl.zeros([BLOCK_D, N], dtype=tl.float32)  # dL/dh_t, carried backwards in time
    gA = tl.zeros([BLOCK_D, N], dtype=tl.float32)
    for s in range(L):
        t = L - 1 - s
        row = (b * L + t) * D + d
        ut = tl.load(u_ptr + row, mask=dmask, other=0.0)
        dtt = tl.load(dt_ptr + row, mask=dmask, other=0.0)
        gyt = tl.load(gy_ptr + row, mask=dmask, other=0.0)
        Bt = tl.load(B_ptr + (b * L + t) * N + n)
        Ct = tl.load(C_ptr + (b * L + t) * N + n)
        ht = tl.load(h_ptr + row[:, None] * N + n[None, :], mask=dmask[:, None], other=0.0)
        h_prev = tl.load(h_ptr + (row - D)[:, None] * N + n[None, :], mask=(dmask & (d * 0 + t > 0))[:, None], other=0.0)
        gh += gyt[:, None] * Ct[None, :]
        part = (pd * Bsz * L + b * L + t) * N + n
        tl.store(gC_ptr + part, tl.sum(ht * gyt[:, None], axis=0))
        decay = tl.exp(dtt[:, None] * A)
        gdecay = gh * decay * h_prev  # dL/d(dt A) through the decay
        tl.store(gdt_ptr + row, tl.sum(gdecay * A + gh * ut[:, None] * Bt[None, :], axis=1), mask=dmask)
        tl.store(gu_ptr + row, dtt * tl.sum(gh * Bt[None, :], axis=1), mask=dmask)
        tl.store(gB_ptr + part, tl.sum(gh * (dtt * ut)[:, None], axis=0))
        gA += gdecay * dtt[:, None]
        gh = gh * decay
    tl.store(gA_ptr + (b * D + d[:, None]) * N + n[None, :], gA, mask=dmask[:, None])


def _block_d(D: int) -> int:
    return min(triton.next_power_of_2(D), 32)


class SelectiveScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt, A, B, C):
        Bsz, L, D = u.shape
        N = A.shape[1]
        u, dt, A, B, C = (t.float().contiguous() for t in (u, dt, A, B, C))
        y = torch.empty_like(u)
        h = u.new_empty(Bsz, L, D, N)
        block = _block_d(D)
        _scan_fwd_kernel[(Bsz, triton.cdiv(D, block))](u, dt, A, B, C, y, h, L, D, N=N, BLOCK_D=block)
        ctx.save_for_backward(u, dt, A, B, C, h)
        return y

    @staticmethod
    def backward(ctx, gy):
        u, dt, A, B, C, h = ctx.saved_tensors
        Bsz, L, D = u.shape
        N = A.shape[1]
        block = _block_d(D)
        nd = triton.cdiv(D, block)
        gu, gdt = torch.empty_like(u), torch.empty_like(u)
        gA = u.new_empty(Bsz, D, N)
        gB, gC = u.new_empty(nd, Bsz, L, N), u.new_empty(nd, Bsz, L, N)
        _scan_bwd_kernel[(Bsz, nd)](u, dt, A, B, C, h, gy.float().contiguous(), gu, gdt, gA, gB, gC,
                                    L, D, Bsz, N=N, BLOCK_D=block)
        return gu, gdt, gA.sum(0), gB.sum(0), gC.sum(0)


def selective_scan(u: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Triton selective scan with ``selective_scan_naive``'s signature (N must be a power of two);
    returns float32 y: (Bt, L, D)."""
    return SelectiveScanFunction.apply(u, dt, A, B, C)
