"""Triton WKV: one program per (batch, block of channels) walks time inside the kernel.

Forward stores ``y`` and ``log D_t`` (log of the denominator). Backward walks time in reverse and keeps
running sums over future outputs in the same max-shifted form, so every exponential it takes is <= 1.

k, v and the output gradient are read in their own dtypes (bf16 projections under autocast) and converted in
registers, and the gradients of k and v are written in those dtypes: no float32 copies of them before the kernels
and no casts after. The math, ``y`` and the saved ``log D_t`` are float32 (the backward needs both exact), as are
w and u.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.partial_sums import sum_rows


@triton.jit
def _wkv4_fwd_kernel(w_ptr, u_ptr, k_ptr, v_ptr, y_ptr, logd_ptr, L, C, BLOCK_C: tl.constexpr):
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = c < C
    w = tl.load(w_ptr + c, mask=mask, other=0.0)
    u = tl.load(u_ptr + c, mask=mask, other=0.0)
    num = tl.zeros([BLOCK_C], dtype=tl.float32)
    den = tl.zeros([BLOCK_C], dtype=tl.float32)
    p = tl.full([BLOCK_C], -1e38, dtype=tl.float32)
    offs = b * L * C + c
    for t in range(L):
        kt = tl.load(k_ptr + offs + t * C, mask=mask, other=0.0).to(tl.float32)
        vt = tl.load(v_ptr + offs + t * C, mask=mask, other=0.0).to(tl.float32)
        q = tl.maximum(p, u + kt)
        e1 = tl.exp(p - q)
        e2 = tl.exp(u + kt - q)
        d = e1 * den + e2
        tl.store(y_ptr + offs + t * C, (e1 * num + e2 * vt) / d, mask=mask)
        tl.store(logd_ptr + offs + t * C, q + tl.log(d), mask=mask)
        q = tl.maximum(p - w, kt)
        e1 = tl.exp(p - w - q)
        e2 = tl.exp(kt - q)
        num = e1 * num + e2 * vt
        den = e1 * den + e2
        p = q


@triton.jit
def _wkv4_bwd_kernel(w_ptr, u_ptr, k_ptr, v_ptr, y_ptr, logd_ptr, gy_ptr, gk_ptr, gv_ptr, gw_ptr, gu_ptr,
                     L, C, BLOCK_C: tl.constexpr):
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = c < C
    w = tl.load(w_ptr + c, mask=mask, other=0.0)
    u = tl.load(u_ptr + c, mask=mask, other=0.0)
    # over future outputs t > i, shifted by e^{m}:  x1 = sum e^{-(t-1-i)w - logD_t} gy_t,  x2: same with gy_t y_t,
    # z1, z2: the same sums weighted by (t-1-i), which is what d/dw needs.
    x1 = tl.zeros([BLOCK_C], dtype=tl.float32)
    x2 = tl.zeros([BLOCK_C], dtype=tl.float32)
    z1 = tl.zeros([BLOCK_C], dtype=tl.float32)
    z2 = tl.zeros([BLOCK_C], dtype=tl.float32)
    m = tl.full([BLOCK_C], -1e38, dtype=tl.float32)
    gw = tl.zeros([BLOCK_C], dtype=tl.float32)
    gu = tl.zeros([BLOCK_C], dtype=tl.float32)
    offs = b * L * C + c
    for s in range(L):
        t = L - 1 - s
        kt = tl.load(k_ptr + offs + t * C, mask=mask, other=0.0).to(tl.float32)
        vt = tl.load(v_ptr + offs + t * C, mask=mask, other=0.0).to(tl.float32)
        yt = tl.load(y_ptr + offs + t * C, mask=mask, other=0.0)
        ld = tl.load(logd_ptr + offs + t * C, mask=mask, other=0.0)
        gyt = tl.load(gy_ptr + offs + t * C, mask=mask, other=0.0).to(tl.float32)
        f = tl.exp(kt + m)  # <= 1: k_t's weight in any later denominator is at most that denominator
        gk = f * (vt * x1 - x2)
        gv = f * x1
        gw -= f * (vt * z1 - z2)
        d = gyt * tl.exp(u + kt - ld)  # the current-token (bonus) term
        gk += d * (vt - yt)
        gv += d
        gu += d * (vt - yt)
        tl.store(gk_ptr + offs + t * C, gk.to(gk_ptr.dtype.element_ty), mask=mask)
        tl.store(gv_ptr + offs + t * C, gv.to(gv_ptr.dtype.element_ty), mask=mask)
        m_new = tl.maximum(m - w, -ld)
        a = tl.exp(m - w - m_new)
        e = tl.exp(-ld - m_new)
        z1 = a * (z1 + x1)
        z2 = a * (z2 + x2)
        x1 = a * x1 + e * gyt
        x2 = a * x2 + e * gyt * yt
        m = m_new
    tl.store(gw_ptr + b * C + c, gw, mask=mask)
    tl.store(gu_ptr + b * C + c, gu, mask=mask)


def _grid(B: int, C: int, block: int):
    return (B, triton.cdiv(C, block))


class WKV4Function(torch.autograd.Function):
    """WKV forward and backward; k, v (and the output gradient) contiguous in any float dtype, w, u float32."""

    @staticmethod
    def forward(ctx, w, u, k, v):
        B, L, C = k.shape
        w, u = w.float().contiguous(), u.float().contiguous()
        k, v = k.contiguous(), v.contiguous()
        y = torch.empty(B, L, C, dtype=torch.float32, device=k.device)
        logd = torch.empty_like(y)
        block = min(triton.next_power_of_2(C), 64)
        _wkv4_fwd_kernel[_grid(B, C, block)](w, u, k, v, y, logd, L, C, BLOCK_C=block)
        ctx.save_for_backward(w, u, k, v, y, logd)
        ctx.block = block
        return y

    @staticmethod
    def backward(ctx, gy):
        w, u, k, v, y, logd = ctx.saved_tensors
        B, L, C = k.shape
        gk, gv = torch.empty_like(k), torch.empty_like(v)
        partial = y.new_empty(2, B, C)  # per-sequence partial sums of gw and gu, both finished by one sum over B
        gw, gu = partial
        _wkv4_bwd_kernel[_grid(B, C, ctx.block)](w, u, k, v, y, logd, gy.contiguous(), gk, gv, gw, gu,
                                                 L, C, BLOCK_C=ctx.block)
        return *sum_rows(partial), gk, gv


def wkv4(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Triton WKV with ``wkv4_naive``'s signature: w, u: (C,); k, v: (B, L, C) -> float32 y: (B, L, C); the
    gradients of k and v come in their dtypes."""
    return WKV4Function.apply(w, u, k, v)
