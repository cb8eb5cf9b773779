"""Triton selective scan with Mamba's elementwise work fused in (dt bias and softplus, D skip, silu(z) gate).

One program per (batch, block of channels) keeps its (BLOCK_E, N) float32 state on chip and walks time inside
the kernel. Storing every state h_t for the backward would cost (Bt, L, E, N) float32 written once and read
back, by far the largest traffic of the op; so the forward stores only the state entering each chunk of
``CHUNK`` steps, and the backward, chunk by chunk from the last, walks the chunk forward again from that state
(keeping each step's incoming state in a per-program scratch of CHUNK states, meant to stay in L2), then walks
it back in reverse carrying dL/dh_t. B and C are shared by all channels, so each program writes its own
partial dB, dC (and dA, dD, d delta_bias over the batch) and the wrapper sums them: no atomics, so a run is
bit-reproducible.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

# Steps between stored states: they cost 1/CHUNK of storing every h_t, while the backward's scratch (CHUNK states per
# program: 32 KiB at BLOCK_E=32, N=16) should fit in L2 for all resident programs. Compiled for sm_90 the backward
# takes 128 registers a thread, so 4 programs an SM, 528 on an H100: 17 MB of its 50 MB L2 (estimate, not profiled).
CHUNK = 16


@triton.jit
def _sigmoid(x):
    e = tl.exp(-tl.abs(x))  # in (0, 1]: no overflow for large |x|
    return tl.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@triton.jit
def _softplus(x):
    """log(1 + exp(x)) as torch's softplus (x itself above 20), accurate where exp(x) is far below 1."""
    e = tl.exp(-tl.abs(x))
    w = 1.0 + e
    # log1p(e): log(w) * e / (w - 1) divides out the rounding of 1 + e (and is e where 1 + e rounds to 1)
    log1p = tl.where(w == 1.0, e, tl.log(w) * e / (w - 1.0))
    return tl.where(x > 20.0, x, tl.maximum(x, 0.0) + log1p)


@triton.jit
def _row(ptr, b, t, e, s_b, s_t, s_e, mask):
    """Row t of sequence b of a (Bt, L, E) tensor with any strides, in float32."""
    return tl.load(ptr + b * s_b + t * s_t + e * s_e, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _scan_fwd_kernel(u_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr, y_ptr, state_ptr, L, E,
                     su_b, su_t, su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n,
                     N: tl.constexpr, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr, HAS_D: tl.constexpr,
                     HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr):
    b = tl.program_id(0)
    e = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    n = tl.arange(0, N)
    emask = e < E
    A = tl.load(A_ptr + e[:, None] * N + n[None, :], mask=emask[:, None], other=0.0)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + e, mask=emask, other=0.0)
    if HAS_D:
        Dskip = tl.load(D_ptr + e, mask=emask, other=0.0)
    h = tl.zeros([BLOCK_E, N], dtype=tl.float32)
    n_chunks = tl.cdiv(L, CHUNK)
    for c in range(n_chunks):
        tl.store(state_ptr + ((b * n_chunks + c) * E + e[:, None]) * N + n[None, :], h, mask=emask[:, None])
        for t in range(c * CHUNK, tl.minimum(c * CHUNK + CHUNK, L)):
            ut = _row(u_ptr, b, t, e, su_b, su_t, su_e, emask)
            dtt = _row(dt_ptr, b, t, e, sdt_b, sdt_t, sdt_e, emask)
            if HAS_BIAS:
                dtt += bias
            if SOFTPLUS:
                dtt = _softplus(dtt)
            Bt = tl.load(B_ptr + b * sB_b + t * sB_t + n * sB_n).to(tl.float32)
            Ct = tl.load(C_ptr + b * sC_b + t * sC_t + n * sC_n).to(tl.float32)
            h = tl.exp(dtt[:, None] * A) * h + (dtt * ut)[:, None] * Bt[None, :]
            y = tl.sum(h * Ct[None, :], axis=1)
            if HAS_D:
                y += Dskip * ut
            if HAS_Z:
                zt = _row(z_ptr, b, t, e, sz_b, sz_t, sz_e, emask)
                y *= zt * _sigmoid(zt)
            tl.store(y_ptr + (b * L + t) * E + e, y, mask=emask)


@triton.jit
def _scan_bwd_kernel(u_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr, state_ptr, gy_ptr, scratch_ptr,
                     gu_ptr, gdt_ptr, gz_ptr, gA_ptr, gB_ptr, gC_ptr, gD_ptr, gbias_ptr, L, E, Bsz,
                     su_b, su_t, su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n,
                     sgy_b, sgy_t, sgy_e,
                     N: tl.constexpr, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr, HAS_D: tl.constexpr,
                     HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr):
    b = tl.program_id(0)
    pe = tl.program_id(1)
    e = pe * BLOCK_E + tl.arange(0, BLOCK_E)
    n = tl.arange(0, N)
    emask = e < E
    A = tl.load(A_ptr + e[:, None] * N + n[None, :], mask=emask[:, None], other=0.0)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + e, mask=emask, other=0.0)
        gbias = tl.zeros([BLOCK_E], dtype=tl.float32)
    if HAS_D:
        Dskip = tl.load(D_ptr + e, mask=emask, other=0.0)
        gD = tl.zeros([BLOCK_E], dtype=tl.float32)
    # this program's scratch: slot s holds the state entering step s of the current chunk
    scratch = (scratch_ptr + (b * tl.num_programs(1) + pe) * CHUNK * BLOCK_E * N
               + tl.arange(0, BLOCK_E)[:, None] * N + n[None, :])
    gh = tl.zeros([BLOCK_E, N], dtype=tl.float32)  # dL/dh_t, carried backwards in time across chunks
    gA = tl.zeros([BLOCK_E, N], dtype=tl.float32)
    n_chunks = tl.cdiv(L, CHUNK)
    for ci in range(n_chunks):
        c = n_chunks - 1 - ci
        start = c * CHUNK
        end = tl.minimum(start + CHUNK, L)
        h = tl.load(state_ptr + ((b * n_chunks + c) * E + e[:, None]) * N + n[None, :], mask=emask[:, None],
                    other=0.0)
        for t in range(start, end):
            tl.store(scratch + (t - start) * BLOCK_E * N, h)
            ut = _row(u_ptr, b, t, e, su_b, su_t, su_e, emask)
            dtt = _row(dt_ptr, b, t, e, sdt_b, sdt_t, sdt_e, emask)
            if HAS_BIAS:
                dtt += bias
            if SOFTPLUS:
                dtt = _softplus(dtt)
            Bt = tl.load(B_ptr + b * sB_b + t * sB_t + n * sB_n).to(tl.float32)
            h = tl.exp(dtt[:, None] * A) * h + (dtt * ut)[:, None] * Bt[None, :]
        # the reverse walk reads scratch slots other threads of this program may have written
        tl.debug_barrier()
        for i in range(end - start):
            t = end - 1 - i
            h_prev = tl.load(scratch + (t - start) * BLOCK_E * N)  # h is h_t, h_prev h_{t-1}
            ut = _row(u_ptr, b, t, e, su_b, su_t, su_e, emask)
            dt_in = _row(dt_ptr, b, t, e, sdt_b, sdt_t, sdt_e, emask)  # before softplus
            if HAS_BIAS:
                dt_in += bias
            dtt = _softplus(dt_in) if SOFTPLUS else dt_in
            Bt = tl.load(B_ptr + b * sB_b + t * sB_t + n * sB_n).to(tl.float32)
            Ct = tl.load(C_ptr + b * sC_b + t * sC_t + n * sC_n).to(tl.float32)
            gy = _row(gy_ptr, b, t, e, sgy_b, sgy_t, sgy_e, emask)  # dL/d(output), then dL/d(ungated y)
            row = (b * L + t) * E + e
            if HAS_Z:
                zt = _row(z_ptr, b, t, e, sz_b, sz_t, sz_e, emask)
                sz = _sigmoid(zt)
                y = tl.sum(h * Ct[None, :], axis=1)  # recomputed, not saved: one (BLOCK_E, N) product
                if HAS_D:
                    y += Dskip * ut
                tl.store(gz_ptr + row, gy * y * sz * (1.0 + zt * (1.0 - sz)), mask=emask)  # silu' = s (1 + z (1 - s))
                gy = gy * zt * sz
            gh += gy[:, None] * Ct[None, :]
            part = (pe * Bsz * L + b * L + t) * N + n
            tl.store(gC_ptr + part, tl.sum(h * gy[:, None], axis=0))
            tl.store(gB_ptr + part, tl.sum(gh * (dtt * ut)[:, None], axis=0))
            decay = tl.exp(dtt[:, None] * A)
            gdecay = gh * decay * h_prev  # dL/d(dt A) through the decay
            ghB = tl.sum(gh * Bt[None, :], axis=1)
            gdt = tl.sum(gdecay * A, axis=1) + ut * ghB
            gu = dtt * ghB
            if HAS_D:
                gu += Dskip * gy
                gD += gy * ut
            if SOFTPLUS:
                gdt = gdt * _sigmoid(dt_in)
            if HAS_BIAS:
                gbias += gdt
            tl.store(gu_ptr + row, gu, mask=emask)
            tl.store(gdt_ptr + row, gdt, mask=emask)
            gA += gdecay * dtt[:, None]
            gh = gh * decay
            h = h_prev
        # the next chunk's forward walk overwrites slots this walk read
        tl.debug_barrier()
    tl.store(gA_ptr + (b * E + e[:, None]) * N + n[None, :], gA, mask=emask[:, None])
    if HAS_D:
        tl.store(gD_ptr + b * E + e, gD, mask=emask)
    if HAS_BIAS:
        tl.store(gbias_ptr + b * E + e, gbias, mask=emask)


def _block_e(E: int) -> int:
    return min(triton.next_power_of_2(E), 32)


def _strides(x: torch.Tensor | None) -> tuple[int, ...]:
    return (0, 0, 0) if x is None else x.stride()


def _f32(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.float().contiguous()


class SelectiveScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt, A, B, C, D, z, delta_bias, delta_softplus):
        Bsz, L, E = u.shape
        N = A.shape[1]
        A, D, delta_bias = _f32(A), _f32(D), _f32(delta_bias)
        y = torch.empty(Bsz, L, E, device=u.device, dtype=torch.float32)
        states = torch.empty(Bsz, triton.cdiv(L, CHUNK), E, N, device=u.device, dtype=torch.float32)
        block = _block_e(E)
        _scan_fwd_kernel[(Bsz, triton.cdiv(E, block))](
            u, dt, A, B, C, D, z, delta_bias, y, states, L, E,
            *u.stride(), *dt.stride(), *_strides(z), *B.stride(), *C.stride(),
            N=N, BLOCK_E=block, CHUNK=CHUNK, HAS_D=D is not None, HAS_Z=z is not None,
            HAS_BIAS=delta_bias is not None, SOFTPLUS=delta_softplus)
        ctx.save_for_backward(u, dt, A, B, C, D, z, delta_bias, states)
        ctx.delta_softplus = delta_softplus
        return y

    @staticmethod
    def backward(ctx, gy):
        u, dt, A, B, C, D, z, delta_bias, states = ctx.saved_tensors
        Bsz, L, E = u.shape
        N = A.shape[1]
        block = _block_e(E)
        ne = triton.cdiv(E, block)

        def f32(*shape):
            return torch.empty(*shape, device=u.device, dtype=torch.float32)

        # gradients of the (Bt, L, E) inputs come out contiguous in the input's dtype; the rest as float32 partials
        gu = torch.empty(u.shape, device=u.device, dtype=u.dtype)
        gdt = torch.empty(dt.shape, device=u.device, dtype=dt.dtype)
        gz = None if z is None else torch.empty(z.shape, device=u.device, dtype=z.dtype)
        gA, gB, gC = f32(Bsz, E, N), f32(ne, Bsz, L, N), f32(ne, Bsz, L, N)
        gD = None if D is None else f32(Bsz, E)
        gbias = None if delta_bias is None else f32(Bsz, E)
        scratch = f32(Bsz * ne, CHUNK, block, N)
        _scan_bwd_kernel[(Bsz, ne)](
            u, dt, A, B, C, D, z, delta_bias, states, gy, scratch, gu, gdt, gz, gA, gB, gC, gD, gbias, L, E, Bsz,
            *u.stride(), *dt.stride(), *_strides(z), *B.stride(), *C.stride(), *gy.stride(),
            N=N, BLOCK_E=block, CHUNK=CHUNK, HAS_D=D is not None, HAS_Z=z is not None,
            HAS_BIAS=delta_bias is not None, SOFTPLUS=ctx.delta_softplus)
        # autograd casts each gradient to its input's dtype
        return (gu, gdt, gA.sum(0), gB.sum(0), gC.sum(0), None if gD is None else gD.sum(0), gz,
                None if gbias is None else gbias.sum(0), None)


def selective_scan(u: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                   D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                   delta_bias: torch.Tensor | None = None, delta_softplus: bool = False) -> torch.Tensor:
    """Triton selective scan with ``selective_scan_naive``'s signature (N must be a power of two); returns float32
    y: (Bt, L, E). u, dt, z and B, C may be any float dtype and strides (e.g. bf16 views into one projection);
    the math is float32."""
    return SelectiveScanFunction.apply(u, dt, A, B, C, D, z, delta_bias, delta_softplus)
