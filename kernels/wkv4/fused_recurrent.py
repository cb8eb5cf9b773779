"""Triton WKV: one program per (batch, block of channels) walks time inside the kernel.

Forward stores ``y`` and ``log D_t`` (log of the denominator). Backward walks time in reverse and keeps
running sums over future outputs in the same max-shifted form, so every exponential it takes is <= 1.

k, v and the output gradient are read in their own dtypes (bf16 projections under autocast) and converted in
registers, and the gradients of k and v are written in those dtypes: no float32 copies of them before the kernels
and no casts after. The math, ``y`` and the saved ``log D_t`` are float32 (the backward needs both exact), as are
w and u.

Each walk loads step t's rows during the step before it (the backward: after it), so a load's latency overlaps a
step's work instead of stalling the walk, as in the selective scan.

With a receptance r (RWKV's gate), the forward also writes ``sigmoid(r) * y`` in the output dtype asked for, and
the backward reads r and writes its gradient: the gate's sigmoid, float32 product and casts were eager kernels
over (B, L, C) tensors each way, an eighth of RWKV's GPU time at MQAR N=512, d=512 (H100 profile,
``results/SPEED.md``).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from zoo.kernels.layout import channel_block
from zoo.kernels.partial_sums import sum_rows
from zoo.kernels.stable import sigmoid


@triton.jit
def _rows(k_ptr, v_ptr, r_ptr, offs, t, C, mask, HAS_R: tl.constexpr):
    """k_t, v_t and r_t (without r, k_t again) in float32."""
    kt = tl.load(k_ptr + offs + t * C, mask=mask, other=0.0).to(tl.float32)
    vt = tl.load(v_ptr + offs + t * C, mask=mask, other=0.0).to(tl.float32)
    if HAS_R:
        rt = tl.load(r_ptr + offs + t * C, mask=mask, other=0.0).to(tl.float32)
    else:
        rt = kt
    return kt, vt, rt


@triton.jit
def _wkv4_fwd_kernel(w_ptr, u_ptr, k_ptr, v_ptr, r_ptr, y_ptr, logd_ptr, out_ptr, L, C, BLOCK_C: tl.constexpr,
                     HAS_R: tl.constexpr):
    b = tl.program_id(0)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = c < C
    w = tl.load(w_ptr + c, mask=mask, other=0.0)
    u = tl.load(u_ptr + c, mask=mask, other=0.0)
    num = tl.zeros([BLOCK_C], dtype=tl.float32)
    den = tl.zeros([BLOCK_C], dtype=tl.float32)
    p = tl.full([BLOCK_C], -1e38, dtype=tl.float32)
    offs = b * L * C + c
    # step t's rows are loaded during step t - 1 (the last step reloads its own): none depends on the carried sums,
    # so their latency hides behind a step's work instead of stalling the walk
    k_next, v_next, r_next = _rows(k_ptr, v_ptr, r_ptr, offs, 0, C, mask, HAS_R)
    for t in range(L):
        kt, vt, rt = k_next, v_next, r_next
        k_next, v_next, r_next = _rows(k_ptr, v_ptr, r_ptr, offs, tl.minimum(t + 1, L - 1), C, mask, HAS_R)
        q = tl.maximum(p, u + kt)
        e1 = tl.exp(p - q)
        e2 = tl.exp(u + kt - q)
        d = e1 * den + e2
        yt = (e1 * num + e2 * vt) / d
        tl.store(y_ptr + offs + t * C, yt, mask=mask)
        if HAS_R:
            tl.store(out_ptr + offs + t * C, (sigmoid(rt) * yt).to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(logd_ptr + offs + t * C, q + tl.log(d), mask=mask)
        q = tl.maximum(p - w, kt)
        e1 = tl.exp(p - w - q)
        e2 = tl.exp(kt - q)
        num = e1 * num + e2 * vt
        den = e1 * den + e2
        p = q


@triton.jit
def _wkv4_bwd_kernel(w_ptr, u_ptr, k_ptr, v_ptr, r_ptr, y_ptr, logd_ptr, gy_ptr, gk_ptr, gv_ptr, gr_ptr, gw_ptr,
                     gu_ptr, L, C, BLOCK_C: tl.constexpr, HAS_R: tl.constexpr):
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
    # as in the forward, step t's rows are loaded during step t + 1
    k_next, v_next, r_next = _rows(k_ptr, v_ptr, r_ptr, offs, L - 1, C, mask, HAS_R)
    y_next = tl.load(y_ptr + offs + (L - 1) * C, mask=mask, other=0.0)
    ld_next = tl.load(logd_ptr + offs + (L - 1) * C, mask=mask, other=0.0)
    gy_next = tl.load(gy_ptr + offs + (L - 1) * C, mask=mask, other=0.0).to(tl.float32)
    for s in range(L):
        t = L - 1 - s
        kt, vt, rt, yt, ld, gyt = k_next, v_next, r_next, y_next, ld_next, gy_next
        tp = tl.maximum(t - 1, 0)
        k_next, v_next, r_next = _rows(k_ptr, v_ptr, r_ptr, offs, tp, C, mask, HAS_R)
        y_next = tl.load(y_ptr + offs + tp * C, mask=mask, other=0.0)
        ld_next = tl.load(logd_ptr + offs + tp * C, mask=mask, other=0.0)
        gy_next = tl.load(gy_ptr + offs + tp * C, mask=mask, other=0.0).to(tl.float32)
        if HAS_R:  # gyt is the gated output's gradient: dL/dr from it, then dL/dy
            sr = sigmoid(rt)
            tl.store(gr_ptr + offs + t * C, (gyt * yt * sr * (1.0 - sr)).to(gr_ptr.dtype.element_ty), mask=mask)
            gyt = gyt * sr
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


class Launch(NamedTuple):
    """How both WKV kernels are launched: channels per program (a power of two; None: :func:`_block_c` chooses by
    the launch's size) and warps per program. ``python -m zoo.kernels.bench --wkv4 B,L,C`` times the choices."""
    block_c: int | None = None
    num_warps: int = 1


# The channels per program when ``Launch.block_c`` is None: the most of 128, 64 and 32 that still leaves this many
# programs, else 32. Each channel is one sequential walk, so a launch has only B C of them; one warp a program and up
# to four channels a thread kept the most memory traffic in flight. Measured on an H200 (torch 2.11, Triton 3.6;
# bf16 k, v, r, the kernels alone, every launch of 32, 64 or 128 channels and 1, 2 or 4 warps), forward / backward
# us, this rule against the launch before it (64 channels and 4 warps: two threads a channel):
#     B=512, L=128, C=512: 128 channels  164 / 192  against 328 / 376
#     B=128, L=512, C=512:  32 channels  338 / 350  against 366 / 393
#     B=256, L=256, C=128:  32 channels  145 / 150  against 149 / 165
#     B=128, L=512, C=256:  32 channels  283 / 288  against 291 / 318
# The best launch at each shape was within 3% of the rule's, forward + backward. Loading rows 2 to 4 steps ahead
# instead of one was no faster at any launch. RWKV's training step (``zoo.bench.step``, CUDA graphs, one model /
# a group of 4, ms, both launches alternated in one process): 1.79 / 4.99 -> 1.75 / 4.43 at B=256, N=256, d=128;
# 4.82 / 17.74 -> 4.15 / 15.32 at B=512, N=128, d=512; 4.93 / 18.43 -> 4.79 / 16.80 at B=128, N=512, d=512.
MIN_PROGRAMS = 2048


def _block_c(B: int, C: int, launch: Launch) -> int:
    """Channels per program: ``launch.block_c``, or the most of 128, 64 that leaves ``MIN_PROGRAMS``, else 32."""
    return channel_block(launch.block_c, B, C, (128, 64, 32), MIN_PROGRAMS)


class WKV4Function(torch.autograd.Function):
    """WKV forward and backward; k, v, r (and the output gradient) contiguous in any float dtype, w, u float32."""

    @staticmethod
    def forward(ctx, w, u, k, v, r, out_dtype, launch):
        B, L, C = k.shape
        w, u = w.float().contiguous(), u.float().contiguous()
        k, v = k.contiguous(), v.contiguous()
        r = None if r is None else r.contiguous()
        y = torch.empty(B, L, C, dtype=torch.float32, device=k.device)
        logd = torch.empty_like(y)
        out = y if r is None else torch.empty(B, L, C, dtype=out_dtype, device=k.device)
        block = _block_c(B, C, launch)
        _wkv4_fwd_kernel[B, triton.cdiv(C, block)](w, u, k, v, r, y, logd, out, L, C, BLOCK_C=block,
                                                   HAS_R=r is not None, num_warps=launch.num_warps)
        ctx.save_for_backward(w, u, k, v, r, y, logd)
        ctx.launch = block, launch.num_warps
        return out

    @staticmethod
    def backward(ctx, gy):
        w, u, k, v, r, y, logd = ctx.saved_tensors
        B, L, C = k.shape
        gk, gv = torch.empty_like(k), torch.empty_like(v)
        gr = None if r is None else torch.empty_like(r)
        partial = y.new_empty(2, B, C)  # per-sequence partial sums of gw and gu, both finished by one sum over B
        gw, gu = partial
        block, warps = ctx.launch
        _wkv4_bwd_kernel[B, triton.cdiv(C, block)](w, u, k, v, r, y, logd, gy.contiguous(), gk, gv, gr, gw, gu, L, C,
                                                   BLOCK_C=block, HAS_R=r is not None, num_warps=warps)
        return *sum_rows(partial), gk, gv, gr, None, None


def wkv4(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, r: torch.Tensor | None = None,
         out_dtype: torch.dtype = torch.float32, launch: Launch | None = None) -> torch.Tensor:
    """Triton WKV with ``wkv4_naive``'s signature: w, u: (C,); k, v: (B, L, C) -> float32 y: (B, L, C); the
    gradients of k and v come in their dtypes. With r (B, L, C): ``sigmoid(r) * y`` in ``out_dtype`` (r's
    gradient in r's dtype). ``launch`` (None: ``Launch()``) changes only the speed."""
    return WKV4Function.apply(w, u, k, v, r, out_dtype, launch or Launch())
