"""Triton chunked form of RWKV-7's state recurrence (``naive.py``), forward and backward, for decays with a known
lower bound (the RWKV-7 layer's w lies in (-exp(-0.5), 0)).

Per batch and head, state S: (K, V), S_t = diag(exp(w_t)) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T, o_t =
S_t^T r_t. Inside a chunk of C steps entering with state S_0, with cw_t = w_1 + ... + w_t (cw_0 = 0) and
sa_t = S_{t-1}^T a_t, unrolling the recurrence gives, row t of each [C, .] matrix being step t:

    SA = T (Ak V + â S_0),                T = (I - A)^-1
    O  = r̂ S_0 + Rb SA + Rk V
    S_C = diag(exp(cw_C)) S_0 + b̃^T SA + k̃^T V

with the rows â_t = a_t exp(cw_{t-1}), r̂_t = r_t exp(cw_t), b̂_j = b_j exp(-cw_j), k̂_j = k_j exp(-cw_j),
b̃_j = b_j exp(cw_C - cw_j), k̃_j = k_j exp(cw_C - cw_j), and the [C, C] matrices A = â b̂^T and Ak = â k̂^T
(strictly lower triangular: j < t), Rb = r̂ b̂^T and Rk = r̂ k̂^T (lower triangular, diagonal included): each
product â_t . b̂_j is a_t^T diag(exp(cw_{t-1} - cw_j)) b_j, the decay from step j to step t - 1. Only SA, O and
S_C need S_0; everything else is the chunk's own, so a program walks the chunks in order with S on chip, a few
small matmuls a chunk. The columns of S (and of SA, O) evolve independently, so a program owns a block of
``Launch.block_v`` value columns of one batch and head, and recomputes the chunk's V-free matrices. T is the sum of A's powers (A is nilpotent): (I + A)(I + A^2)
(I + A^4)(I + A^8) for C = 16, four products and three squarings.

Splitting exp(cw_{t-1} - cw_j) into exp(cw_{t-1}) exp(-cw_j) is what makes these matmuls, and what needs the
bound: exp(-cw_j) reaches exp(C |w_min|), and the masked upper triangles of A, Ak, Rb, Rk hold products up to
that size. The dispatcher (``zoo.kernels.rwkv7``) takes this path only where C |w_min| <= ``MAX_EXPONENT``, far
below float32's range (exp(88)); other decays go to the fused recurrence, whose every exponent is one step's.

The forward keeps, per chunk, the state entering it (B H ceil(L / C) (K, V) float32 states, 1/C of every state),
T and SA (as many floats as O). The backward walks the chunks in reverse from those, carrying dS = dL/dS_C,
recomputes the rows and Ak, Rb, Rk, and differentiates the three lines above (dY = T^T dSA is the gradient of
T's right-hand side, and dA = dY SA^T that of A, both masked to A's triangle); the exponentials' gradients are
summed into dL/dcw, then into dw by a reverse cumulative sum. dv is complete in its program; dr, dw, dk, da, db
sum over V, so each program writes its partial over its columns and the wrapper sums the blocks in order: no
atomics, a run is bit-reproducible. No host syncs: forward and backward capture in a CUDA graph.

Matmuls run in tf32 on the GPU by default (``Launch.precision``; "ieee" for full float32), T's always in
float32. The interpreter (CPU tests) computes every matmul in float32.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from zoo.kernels.backend import not_compiled
from zoo.kernels.partial_sums import sum_blocks

# Steps a chunk: T's product formula above is written for 16.
CHUNK = 16

# Largest C |w_min| this path takes: exp(-cw_j) and the masked triangles stay below exp(MAX_EXPONENT).
MAX_EXPONENT = 30.0


def fits(w_min: float | None) -> bool:
    """Whether decays bounded below by ``w_min`` (None: unbounded) may take this path."""
    return w_min is not None and CHUNK * abs(w_min) <= MAX_EXPONENT


@triton.jit
def _tile(ptr, i_b, i_h, t, idx, s_b, s_t, s_h, s_d, mask):
    """Rows t ([C]) of sequence i_b, head i_h of a (B, L, H, D) tensor, entries idx ([BD]): [C, BD] float32."""
    return tl.load(ptr + i_b * s_b + t[:, None] * s_t + i_h * s_h + idx[None, :] * s_d, mask=mask,
                   other=0.0).to(tl.float32)


@triton.jit
def _put(ptr, value, i_b, i_h, t, idx, s_b, s_t, s_h, s_d, mask):
    tl.store(ptr + i_b * s_b + t[:, None] * s_t + i_h * s_h + idx[None, :] * s_d,
             value.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _inverse(A, C: tl.constexpr):
    """(I - A)^-1 for a strictly lower triangular [16, 16] A: (I + A)(I + A^2)(I + A^4)(I + A^8), in float32."""
    tt = tl.arange(0, C)
    eye = tl.where(tt[:, None] == tt[None, :], 1.0, 0.0)
    T = eye + A
    P = tl.dot(A, A, input_precision="ieee")
    T = tl.dot(T, eye + P, input_precision="ieee")
    P = tl.dot(P, P, input_precision="ieee")
    T = tl.dot(T, eye + P, input_precision="ieee")
    P = tl.dot(P, P, input_precision="ieee")
    return tl.dot(T, eye + P, input_precision="ieee")


@triton.jit
def _hats(r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, i_b, i_h, t, kk, mask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h,
          sw_d, sk_b, sk_t, sk_h, sk_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d, C: tl.constexpr):
    """A chunk's rows (module docstring): â, b̂, k̂, r̂, b̃, k̃, cw, cw_{t-1} ([C, BK]) and cw_C ([BK])."""
    r = _tile(r_ptr, i_b, i_h, t, kk, sr_b, sr_t, sr_h, sr_d, mask)
    w = _tile(w_ptr, i_b, i_h, t, kk, sw_b, sw_t, sw_h, sw_d, mask)
    k = _tile(k_ptr, i_b, i_h, t, kk, sk_b, sk_t, sk_h, sk_d, mask)
    a = _tile(a_ptr, i_b, i_h, t, kk, sa_b, sa_t, sa_h, sa_d, mask)
    b = _tile(b_ptr, i_b, i_h, t, kk, sb_b, sb_t, sb_h, sb_d, mask)
    cw = tl.cumsum(w, axis=0)
    cwp = cw - w
    last = tl.sum(tl.where(tl.arange(0, C)[:, None] == C - 1, cw, 0.0), axis=0)
    back = tl.exp(-cw)
    tail = tl.exp(last[None, :] - cw)
    return a * tl.exp(cwp), b * back, k * back, r * tl.exp(cw), b * tail, k * tail, cw, cwp, last


@triton.jit
def _products(ahat, bhat, khat, rhat, C: tl.constexpr, PRECISION: tl.constexpr):
    """Ak (strictly lower triangular), Rb and Rk (lower triangular): [C, C]."""
    tt = tl.arange(0, C)
    earlier = tt[:, None] > tt[None, :]
    upto = tt[:, None] >= tt[None, :]
    Ak = tl.where(earlier, tl.dot(ahat, tl.trans(khat), input_precision=PRECISION), 0.0)
    Rb = tl.where(upto, tl.dot(rhat, tl.trans(bhat), input_precision=PRECISION), 0.0)
    Rk = tl.where(upto, tl.dot(rhat, tl.trans(khat), input_precision=PRECISION), 0.0)
    return Ak, Rb, Rk


@triton.jit
def _rwkv7_chunk_fwd_kernel(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, o_ptr, states, t_ptr, sa_ptr, L, H, K, V, VP,
                            sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                            sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d,
                            so_b, so_t, so_h, so_d, BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr,
                            PRECISION: tl.constexpr):
    """One program per (block of BV value columns, batch and head). Keeps for the backward each chunk's entering
    state (states: [B H, n_chunks, BK, VP]), T ([B H, n_chunks, C, C], written by the first block) and SA
    ([B H, n_chunks, C, VP])."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    tt = tl.arange(0, C)
    kk = tl.arange(0, BK)
    vv = i_v * BV + tl.arange(0, BV)
    n_chunks = tl.cdiv(L, C)
    states += i_bh.to(tl.int64) * n_chunks * BK * VP + kk[:, None] * VP + vv[None, :]
    sa_ptr += i_bh.to(tl.int64) * n_chunks * C * VP + tt[:, None] * VP + vv[None, :]
    t_ptr += i_bh.to(tl.int64) * n_chunks * C * C + tt[:, None] * C + tt[None, :]
    first = (tl.zeros((C, C), dtype=tl.int32) + i_v) == 0  # T is written by the first block of columns
    S = tl.zeros((BK, BV), dtype=tl.float32)
    for i_c in range(n_chunks):
        tl.store(states + i_c * BK * VP, S)
        t = i_c * C + tt
        kmask = (t[:, None] < L) & (kk[None, :] < K)
        vmask = (t[:, None] < L) & (vv[None, :] < V)
        ahat, bhat, khat, rhat, btil, ktil, cw, cwp, last = _hats(
            r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, i_b, i_h, t, kk, kmask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h,
            sw_d, sk_b, sk_t, sk_h, sk_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d, C)
        A = tl.where(tt[:, None] > tt[None, :], tl.dot(ahat, tl.trans(bhat), input_precision="ieee"), 0.0)
        T = _inverse(A, C)
        tl.store(t_ptr + i_c * C * C, T, mask=first)
        Ak, Rb, Rk = _products(ahat, bhat, khat, rhat, C, PRECISION)
        v = _tile(v_ptr, i_b, i_h, t, vv, sv_b, sv_t, sv_h, sv_d, vmask)
        Y = tl.dot(Ak, v, input_precision=PRECISION) + tl.dot(ahat, S, input_precision=PRECISION)
        SA = tl.dot(T, Y, input_precision=PRECISION)
        tl.store(sa_ptr + i_c * C * VP, SA)
        o = (tl.dot(rhat, S, input_precision=PRECISION) + tl.dot(Rb, SA, input_precision=PRECISION)
             + tl.dot(Rk, v, input_precision=PRECISION))
        _put(o_ptr, o, i_b, i_h, t, vv, so_b, so_t, so_h, so_d, vmask)
        S = (tl.exp(last)[:, None] * S + tl.dot(tl.trans(btil), SA, input_precision=PRECISION)
             + tl.dot(tl.trans(ktil), v, input_precision=PRECISION))


@triton.jit
def _rwkv7_chunk_bwd_kernel(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, states, t_ptr, sa_ptr, do_ptr,
                            dr_ptr, dw_ptr, dk_ptr, dv_ptr, da_ptr, db_ptr, L, H, K, V, VP, Bsz,
                            sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                            sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d,
                            sdo_b, sdo_t, sdo_h, sdo_d, BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr,
                            PRECISION: tl.constexpr):
    """dv into a contiguous (B, L, H, V); dr, dw, dk, da, db, sums over V, as this program's partial over its value
    columns into contiguous (n_blocks, B, L, H, K) float32 buffers."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    tt = tl.arange(0, C)
    kk = tl.arange(0, BK)
    vv = i_v * BV + tl.arange(0, BV)
    n_chunks = tl.cdiv(L, C)
    states += i_bh.to(tl.int64) * n_chunks * BK * VP + kk[:, None] * VP + vv[None, :]
    sa_ptr += i_bh.to(tl.int64) * n_chunks * C * VP + tt[:, None] * VP + vv[None, :]
    t_ptr += i_bh.to(tl.int64) * n_chunks * C * C + tt[:, None] * C + tt[None, :]
    part = i_v.to(tl.int64) * Bsz * L * H * K
    dr_ptr += part
    dw_ptr += part
    dk_ptr += part
    da_ptr += part
    db_ptr += part
    earlier = tt[:, None] > tt[None, :]
    upto = tt[:, None] >= tt[None, :]
    dS = tl.zeros((BK, BV), dtype=tl.float32)  # dL/dS_C of the chunk: none after the last
    for j in range(n_chunks):
        i_c = n_chunks - 1 - j
        S = tl.load(states + i_c * BK * VP)
        T = tl.load(t_ptr + i_c * C * C)
        SA = tl.load(sa_ptr + i_c * C * VP)
        t = i_c * C + tt
        kmask = (t[:, None] < L) & (kk[None, :] < K)
        vmask = (t[:, None] < L) & (vv[None, :] < V)
        ahat, bhat, khat, rhat, btil, ktil, cw, cwp, last = _hats(
            r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, i_b, i_h, t, kk, kmask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h,
            sw_d, sk_b, sk_t, sk_h, sk_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d, C)
        Ak, Rb, Rk = _products(ahat, bhat, khat, rhat, C, PRECISION)
        v = _tile(v_ptr, i_b, i_h, t, vv, sv_b, sv_t, sv_h, sv_d, vmask)
        do = _tile(do_ptr, i_b, i_h, t, vv, sdo_b, sdo_t, sdo_h, sdo_d, vmask)
        # through S_C = diag(exp(cw_C)) S_0 + b̃^T SA + k̃^T V and O = r̂ S_0 + Rb SA + Rk V
        dSA = tl.dot(tl.trans(Rb), do, input_precision=PRECISION) + tl.dot(btil, dS, input_precision=PRECISION)
        dRb = tl.where(upto, tl.dot(do, tl.trans(SA), input_precision=PRECISION), 0.0)
        dRk = tl.where(upto, tl.dot(do, tl.trans(v), input_precision=PRECISION), 0.0)
        dbtil = tl.dot(SA, tl.trans(dS), input_precision=PRECISION)
        dktil = tl.dot(v, tl.trans(dS), input_precision=PRECISION)
        # through SA = T Y, Y = Ak V + â S_0
        dY = tl.dot(tl.trans(T), dSA, input_precision=PRECISION)
        dA = tl.where(earlier, tl.dot(dY, tl.trans(SA), input_precision=PRECISION), 0.0)
        dAk = tl.where(earlier, tl.dot(dY, tl.trans(v), input_precision=PRECISION), 0.0)
        dv = (tl.dot(tl.trans(Rk), do, input_precision=PRECISION) + tl.dot(ktil, dS, input_precision=PRECISION)
              + tl.dot(tl.trans(Ak), dY, input_precision=PRECISION))
        e_last = tl.exp(last)
        dlast = e_last * tl.sum(dS * S, axis=1)
        dS = (e_last[:, None] * dS + tl.dot(tl.trans(rhat), do, input_precision=PRECISION)
              + tl.dot(tl.trans(ahat), dY, input_precision=PRECISION))  # dL/dS_0: the previous chunk's dS
        # through A = â b̂^T, Ak = â k̂^T, Rb = r̂ b̂^T, Rk = r̂ k̂^T, and the S_0 terms of O and Y
        St = tl.trans(S)
        drhat = (tl.dot(do, St, input_precision=PRECISION) + tl.dot(dRb, bhat, input_precision=PRECISION)
                 + tl.dot(dRk, khat, input_precision=PRECISION))
        dahat = (tl.dot(dY, St, input_precision=PRECISION) + tl.dot(dA, bhat, input_precision=PRECISION)
                 + tl.dot(dAk, khat, input_precision=PRECISION))
        dbhat = (tl.dot(tl.trans(dA), ahat, input_precision=PRECISION)
                 + tl.dot(tl.trans(dRb), rhat, input_precision=PRECISION))
        dkhat = (tl.dot(tl.trans(dAk), ahat, input_precision=PRECISION)
                 + tl.dot(tl.trans(dRk), rhat, input_precision=PRECISION))
        # back to the inputs: each hat is its input times an exponential of cw (or cw_{t-1}, or cw_C - cw)
        ahat_d = dahat * ahat
        tilde_d = dbtil * btil + dktil * ktil
        dcw = drhat * rhat - dbhat * bhat - dkhat * khat - tilde_d
        dlast += tl.sum(tilde_d, axis=0)
        # cw_t sums w up to t, cw_{t-1} before t, cw_C the whole chunk
        dw = (tl.cumsum(dcw, axis=0, reverse=True) + tl.cumsum(ahat_d, axis=0, reverse=True) - ahat_d
              + dlast[None, :])
        back = tl.exp(-cw)
        tail = tl.exp(last[None, :] - cw)
        _put(dr_ptr, drhat * tl.exp(cw), i_b, i_h, t, kk, L * H * K, H * K, K, 1, kmask)
        _put(dw_ptr, dw, i_b, i_h, t, kk, L * H * K, H * K, K, 1, kmask)
        _put(dk_ptr, dkhat * back + dktil * tail, i_b, i_h, t, kk, L * H * K, H * K, K, 1, kmask)
        _put(da_ptr, dahat * tl.exp(cwp), i_b, i_h, t, kk, L * H * K, H * K, K, 1, kmask)
        _put(db_ptr, dbhat * back + dbtil * tail, i_b, i_h, t, kk, L * H * K, H * K, K, 1, kmask)
        _put(dv_ptr, dv, i_b, i_h, t, vv, L * H * V, H * V, V, 1, vmask)


class Launch(NamedTuple):
    """How the kernels are launched: value columns per program (a power of two, at least 16), warps per program,
    and the matmuls' precision ("tf32" or "ieee"; T's products are always float32)."""
    block_v: int = 64
    num_warps: int = 4
    precision: str = "tf32"


# The launch the dispatcher (``zoo.kernels.rwkv7``) runs.
LAUNCH = Launch()


class RWKV7ChunkFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, r, w, k, v, a, b, launch):
        Bsz, L, H, K = r.shape
        V = v.shape[-1]
        BK = max(16, triton.next_power_of_2(K))
        BV = min(max(16, triton.next_power_of_2(V)), launch.block_v)
        nv = triton.cdiv(V, BV)
        n_chunks = triton.cdiv(L, CHUNK)
        o = torch.empty(Bsz, L, H, V, device=r.device, dtype=torch.float32)
        states = torch.empty(Bsz * H, n_chunks, BK, nv * BV, device=r.device, dtype=torch.float32)
        T = torch.empty(Bsz * H, n_chunks, CHUNK, CHUNK, device=r.device, dtype=torch.float32)
        SA = torch.empty(Bsz * H, n_chunks, CHUNK, nv * BV, device=r.device, dtype=torch.float32)
        _rwkv7_chunk_fwd_kernel[(nv, Bsz * H)](
            r, w, k, v, a, b, o, states, T, SA, L, H, K, V, nv * BV, *r.stride(), *w.stride(), *k.stride(),
            *v.stride(), *a.stride(), *b.stride(), *o.stride(), BK=BK, BV=BV, C=CHUNK, PRECISION=launch.precision,
            num_warps=launch.num_warps)
        ctx.save_for_backward(r, w, k, v, a, b, states, T, SA)
        ctx.launch, ctx.block_v = launch, BV
        return o

    @staticmethod
    def backward(ctx, do):
        r, w, k, v, a, b, states, T, SA = ctx.saved_tensors
        Bsz, L, H, K = r.shape
        V = v.shape[-1]
        BK, VP = states.shape[-2:]
        BV = ctx.block_v
        nv = VP // BV

        def partial():
            return torch.empty(nv, Bsz, L, H, K, device=r.device, dtype=torch.float32)

        dr, dw, dk, da, db = (partial() for _ in range(5))
        dv = torch.empty(v.shape, device=v.device, dtype=v.dtype)  # contiguous, as the kernel writes it
        _rwkv7_chunk_bwd_kernel[(nv, Bsz * H)](
            r, w, k, v, a, b, states, T, SA, do, dr, dw, dk, dv, da, db, L, H, K, V, VP, Bsz, *r.stride(),
            *w.stride(), *k.stride(), *v.stride(), *a.stride(), *b.stride(), *do.stride(), BK=BK, BV=BV, C=CHUNK,
            PRECISION=ctx.launch.precision, num_warps=ctx.launch.num_warps)
        # the partials over value blocks summed, each into its input's dtype
        return (sum_blocks(dr, r.dtype), sum_blocks(dw, w.dtype), sum_blocks(dk, k.dtype), dv, sum_blocks(da, a.dtype),
                sum_blocks(db, b.dtype), None)


@not_compiled  # hand-written kernels: nothing for Inductor to fuse
def rwkv7_chunk(r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                b: torch.Tensor, launch: Launch = LAUNCH) -> torch.Tensor:
    """``rwkv7_naive``'s result by the chunked Triton kernels above, in float32, for decays bounded below by a
    w_min that :func:`fits` (the caller's promise: the kernels do not check, which would cost a host sync).

    r, w, k, a, b: (B, L, H, K), w the log decays (< 0); v: (B, L, H, V) -> o: (B, L, H, V) float32. Inputs may be
    any float dtype and strides; any K and V (padded to powers of two, at least 16, inside).
    """
    if launch.precision not in ("tf32", "ieee"):
        raise ValueError(f"rwkv7_chunk: launch.precision {launch.precision!r}, expected 'tf32' or 'ieee'")
    if launch.block_v < 16 or launch.block_v & (launch.block_v - 1):
        raise ValueError(f"rwkv7_chunk: launch.block_v {launch.block_v}, expected a power of two >= 16")
    return RWKV7ChunkFunction.apply(r, w, k, v, a, b, launch)
