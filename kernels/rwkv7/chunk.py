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
product â_t . b̂_j is a_t^T diag(exp(cw_{t-1} - cw_j)) b_j, the decay from step j to step t - 1. T is the sum
of A's powers (A is nilpotent): (I + A)(I + A^2)(I + A^4)(I + A^8) for C = 16, four products and three squarings.

Only SA, O and S_C need S_0: everything else is the chunk's own. So only a short chain is sequential, and four
kernels split the work:

* forward: T of every chunk (one program per chunk, batch and head); then the chain S_0 -> SA -> S_C through the
  chunks (one program per block of ``Launch.block_v`` value columns, batch and head: the columns of S evolve
  independently), which also writes each chunk's O and keeps its S_0 and SA.
* backward: the reverse chain dS_C -> dSA = Rb^T dO + b̃ dS_C -> dY = T^T dSA -> dS_0 = exp(cw_C) dS_C + r̂^T dO
  + â^T dY, which also writes V's gradient dV = Rk^T dO + k̃ dS_C + Ak^T dY (its every term is at hand there) and
  keeps each chunk's dS_C and dY; then the key side's gradients (r, w, k, a, b) of every chunk from its S_0, dS_C,
  SA and dY (a program per chunk and block of ``Launch.grads_block_k`` key columns: dA = dY SA^T is A's gradient,
  masked to its triangle; the exponentials' gradients are summed into dL/dcw, then into dw by a reverse
  cumulative sum). With dY kept, no product there contracts over K, so a program holds only its key columns' rows
  of S_0 and dS_C, and it reads them ``Launch.grads_block_v`` value columns at a time, summing each product that
  contracts over V block by block.

The chains do eleven small matmuls a chunk; the rest runs a program per chunk (and key block), B H ceil(L / 16) of them.
Kept between kernels: T, and per chunk S_0 and dS_C (B H ceil(L / C) (K, V) states each, 1/C of every state), SA and dY
(as many values as O each), in ``Launch.states_dtype``. Each gradient is written once by one program: no atomics, a run
is bit-reproducible. No host syncs: forward and backward capture in a CUDA graph.

Splitting exp(cw_{t-1} - cw_j) into exp(cw_{t-1}) exp(-cw_j) is what makes these matmuls, and what needs the
bound: exp(-cw_j) reaches exp(C |w_min|), and the masked upper triangles of A, Ak, Rb, Rk hold products up to
that size. The dispatcher (``zoo.kernels.rwkv7``) takes this path only where C |w_min| <= ``MAX_EXPONENT``, far
below float32's range (exp(88)); other decays go to the fused recurrence, whose every exponent is one step's.

Matmuls run in tf32 on the GPU by default (``Launch.precision``; "ieee" for full float32), T's in float32's
accuracy: "tf32x3" (three tf32 products a product) by default, "ieee" (float32 FMAs) on request. The interpreter
(CPU tests) computes every matmul in float32.

History, measured (``results/SPEED.md`` has each session's numbers). On an H200 (B=256, L=256, H=2, K=V=64, bf16
inputs, ``do_bench`` in one process), the first five-kernel version (T, both chains, O, and one gradient kernel
doing every gradient of a chunk) took 1.130 ms forward + backward against the fused recurrence's 2.688, and a
single walk per (value block, batch, head) doing all of a chunk's work 1.308. On an H100 80GB, with each kernel on
its own launch (b88a582), forward / forward + backward 0.291 / 0.990 ms; there the one gradient kernel was 0.647 ms
a call, the largest piece, holding S_0 and dS_C beside a dozen [C, K] and [C, V] tiles.

Hence the split above, each kernel alone on that H100 (ms, by warps 1 / 2 / 4 / 8; b88a582's kernels and T were
probed the session before, on another H100): the forward chain with O at 64 value columns 0.389 / 0.299 / 0.175 /
0.277 (b88a582: chain 0.145 and O 0.116); the reverse chain with dV 0.442 / 0.381 / 0.199 / 0.301 (b88a582: 0.127,
without dV); the key side's gradients at 64 key columns 1.781 / 0.685 / 0.457 / 0.576, at 32 columns 0.857 / 0.485 /
0.573 / 1.004, at 16 columns 0.721 / 0.882 / 1.284 / 2.279 (b88a582's gradient kernel, with V's side: 0.647 at 4
warps). At 32 value columns the chains took 0.236 and 0.225 on 2 warps, 0.261 and 0.289 on 4. T (unchanged): 0.055
in "tf32x3" on one warp (0.091 in "ieee"; 0.126 at 4 warps), within 1.5e-7 of "ieee". Hence ``Launch``'s defaults: T
in "tf32x3" on one warp, the chains on four, the key side's gradients over all 64 key columns on four. The sum of
these kernels' times is 0.886 ms against b88a582's 0.990 measured whole. Measured whole at 4734089 (another H100, the
kernel bench): 0.220 / 0.870 ms.

Then the states kept for the key side's gradients went to bf16 (``Launch.states_dtype``; fla's chunk kernels keep
theirs in the inputs' dtype too): each kernel alone on an H100 (the kernel bench's ``--rwkv7-kernels``, ms, bf16
against float32 states in one process): the forward chain 0.158 against 0.172, the reverse chain 0.184 against
0.195, the key side's gradients 0.345 against 0.454; with T's 0.049, 0.736 ms forward + backward against 0.870.
Then the key side's gradients summed their products over V in blocks (``Launch.grads_block_v``), each holding a
[C, BKG] accumulator per product rather than S_0's and dS_C's whole [BKG, V] tiles, ms (one H100, the kernel
bench, one process): 64 key columns on 4 warps 0.295 by blocks of 32 values and 0.316 by 16, against 0.350 for all
64 at once; 32 key columns on 2 warps 0.297 and 0.298 (0.354 at once); 64 on 2 warps 0.320 and 0.305. Hence the
default, 64 key columns on 4 warps by blocks of 32 values.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from zoo.kernels.backend import not_compiled
from zoo.kernels.stored_states import check_states_dtype

# Steps a chunk: T's product formula above is written for 16.
CHUNK = 16

# Largest C |w_min| this path takes: exp(-cw_j) and the masked triangles stay below exp(MAX_EXPONENT).
MAX_EXPONENT = 30.0


def fits(w_min: float | None) -> bool:
    """Whether decays bounded below by ``w_min`` (None: unbounded) may take this path."""
    return w_min is not None and CHUNK * abs(w_min) <= MAX_EXPONENT


@triton.jit
def _rows(ptr, i_b, i_h, t, idx, L, H, D, mask):
    """Rows t ([C]) of sequence i_b, head i_h of a contiguous (B, L, H, D) tensor, entries idx ([BD]): [C, BD]
    float32."""
    return tl.load(ptr + ((i_b * L + t[:, None]) * H + i_h) * D + idx[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _put(ptr, value, i_b, i_h, t, idx, L, H, D, mask):
    tl.store(ptr + ((i_b * L + t[:, None]) * H + i_h) * D + idx[None, :], value.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _chunk_rows(r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, i_b, i_h, i_c, kk, L, H, K, C: tl.constexpr):
    """Chunk i_c's rows (module docstring) at key columns kk ([BK]): â, b̂, k̂, r̂, b̃, k̃, cw, cw_{t-1} ([C, BK]),
    cw_C ([BK]), and its steps t and their mask over (t, kk)."""
    t = i_c * C + tl.arange(0, C)
    mask = (t[:, None] < L) & (kk[None, :] < K)
    r = _rows(r_ptr, i_b, i_h, t, kk, L, H, K, mask)
    w = _rows(w_ptr, i_b, i_h, t, kk, L, H, K, mask)
    k = _rows(k_ptr, i_b, i_h, t, kk, L, H, K, mask)
    a = _rows(a_ptr, i_b, i_h, t, kk, L, H, K, mask)
    b = _rows(b_ptr, i_b, i_h, t, kk, L, H, K, mask)
    cw = tl.cumsum(w, axis=0)
    cwp = cw - w
    last = tl.sum(tl.where(tl.arange(0, C)[:, None] == C - 1, cw, 0.0), axis=0)
    back = tl.exp(-cw)
    tail = tl.exp(last[None, :] - cw)
    return a * tl.exp(cwp), b * back, k * back, r * tl.exp(cw), b * tail, k * tail, cw, cwp, last, t, mask


@triton.jit
def _inverse(A, C: tl.constexpr, PRECISION: tl.constexpr):
    """(I - A)^-1 for a strictly lower triangular [16, 16] A: (I + A)(I + A^2)(I + A^4)(I + A^8), in float32
    ("ieee") or its three-tf32 emulation ("tf32x3")."""
    tt = tl.arange(0, C)
    eye = tl.where(tt[:, None] == tt[None, :], 1.0, 0.0)
    T = eye + A
    P = tl.dot(A, A, input_precision=PRECISION)
    T = tl.dot(T, eye + P, input_precision=PRECISION)
    P = tl.dot(P, P, input_precision=PRECISION)
    T = tl.dot(T, eye + P, input_precision=PRECISION)
    P = tl.dot(P, P, input_precision=PRECISION)
    return tl.dot(T, eye + P, input_precision=PRECISION)


@triton.jit
def _lower(x, C: tl.constexpr, STRICT: tl.constexpr):
    """x [C, C] with its upper triangle (and, if STRICT, its diagonal) zeroed."""
    tt = tl.arange(0, C)
    if STRICT:
        return tl.where(tt[:, None] > tt[None, :], x, 0.0)
    return tl.where(tt[:, None] >= tt[None, :], x, 0.0)


@triton.jit
def _chunk_ptrs(ptr, i_bh, n_chunks, i_c, rows, cols, R: tl.constexpr, VP):
    """[len(rows), len(cols)] pointers into chunk i_c's [R, VP] block of a [B H, n_chunks, R, VP] tensor."""
    return ptr + (i_bh.to(tl.int64) * n_chunks + i_c) * R * VP + rows[:, None] * VP + cols[None, :]


@triton.jit
def _rwkv7_chunk_inverse_kernel(r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, t_ptr, L, H, K, BK: tl.constexpr, C: tl.constexpr,
                                PRECISION: tl.constexpr):
    """T of every chunk, one program per (chunk, batch and head): [B H, n_chunks, C, C]."""
    i_c, i_bh = tl.program_id(0), tl.program_id(1)
    ahat, bhat, khat, rhat, btil, ktil, cw, cwp, last, t, kmask = _chunk_rows(
        r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, i_bh // H, i_bh % H, i_c, tl.arange(0, BK), L, H, K, C)
    T = _inverse(_lower(tl.dot(ahat, tl.trans(bhat), input_precision=PRECISION), C, True), C, PRECISION)
    tt = tl.arange(0, C)
    tl.store(_chunk_ptrs(t_ptr, i_bh, tl.num_programs(0), i_c, tt, tt, C, C), T)


@triton.jit
def _chain_step(r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, x_ptr, t_ptr, i_bh, i_c, n_chunks, vv, L, H, K, V,
                BK: tl.constexpr, C: tl.constexpr, PRECISION: tl.constexpr):
    """What a chain's step at chunk i_c reads and shares: the chunk's rows â, r̂, b̃, k̃, cw_C (``_chunk_rows``),
    its [C, BV] rows of x (V forward, dO backward) at columns vv, its T, Rb = r̂ b̂^T and Rk = r̂ k̂^T (lower),
    Ak = â k̂^T (strictly lower), and the mask of its rows of x."""
    i_b, i_h = i_bh // H, i_bh % H
    ahat, bhat, khat, rhat, btil, ktil, cw, cwp, last, t, kmask = _chunk_rows(
        r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, i_b, i_h, i_c, tl.arange(0, BK), L, H, K, C)
    vmask = (t[:, None] < L) & (vv[None, :] < V)
    x = _rows(x_ptr, i_b, i_h, t, vv, L, H, V, vmask)
    tt = tl.arange(0, C)
    T = tl.load(_chunk_ptrs(t_ptr, i_bh, n_chunks, i_c, tt, tt, C, C))
    Rb = _lower(tl.dot(rhat, tl.trans(bhat), input_precision=PRECISION), C, False)
    Rk = _lower(tl.dot(rhat, tl.trans(khat), input_precision=PRECISION), C, False)
    Ak = _lower(tl.dot(ahat, tl.trans(khat), input_precision=PRECISION), C, True)
    return ahat, rhat, btil, ktil, last, x, T, Rb, Rk, Ak, t, vmask


@triton.jit
def _rwkv7_chunk_states_kernel(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, t_ptr, states, sa_ptr, o_ptr, L, H, K, V, VP,
                               BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr, PRECISION: tl.constexpr):
    """The chain through the chunks, one program per (block of BV value columns, batch and head): each chunk's
    entering state S_0 ([B H, n_chunks, BK, VP]), SA ([B H, n_chunks, C, VP]), and O = r̂ S_0 + Rb SA + Rk V."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    vv = i_v * BV + tl.arange(0, BV)
    n_chunks = tl.cdiv(L, C)
    S = tl.zeros((BK, BV), dtype=tl.float32)
    for i_c in range(n_chunks):
        tl.store(_chunk_ptrs(states, i_bh, n_chunks, i_c, tl.arange(0, BK), vv, BK, VP),
                 S.to(states.dtype.element_ty))
        ahat, rhat, btil, ktil, last, v, T, Rb, Rk, Ak, t, vmask = _chain_step(
            r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, v_ptr, t_ptr, i_bh, i_c, n_chunks, vv, L, H, K, V, BK, C, PRECISION)
        Y = tl.dot(Ak, v, input_precision=PRECISION) + tl.dot(ahat, S, input_precision=PRECISION)
        SA = tl.dot(T, Y, input_precision=PRECISION)
        tl.store(_chunk_ptrs(sa_ptr, i_bh, n_chunks, i_c, tl.arange(0, C), vv, C, VP), SA.to(sa_ptr.dtype.element_ty))
        o = (tl.dot(rhat, S, input_precision=PRECISION) + tl.dot(Rb, SA, input_precision=PRECISION)
             + tl.dot(Rk, v, input_precision=PRECISION))
        _put(o_ptr, o, i_bh // H, i_bh % H, t, vv, L, H, V, vmask)
        S = (tl.exp(last)[:, None] * S + tl.dot(tl.trans(btil), SA, input_precision=PRECISION)
             + tl.dot(tl.trans(ktil), v, input_precision=PRECISION))


@triton.jit
def _rwkv7_chunk_grad_states_kernel(r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, do_ptr, t_ptr, dstates, dy_ptr, dv_ptr, L, H, K,
                                    V, VP, BK: tl.constexpr, BV: tl.constexpr, C: tl.constexpr,
                                    PRECISION: tl.constexpr):
    """The chain through the chunks in reverse, one program per (block of BV value columns, batch and head): each
    chunk's dL/dS_C ([B H, n_chunks, BK, VP]) and dY = T^T (Rb^T dO + b̃ dS_C) ([B H, n_chunks, C, VP]), from
    dS_0 = exp(cw_C) dS_C + r̂^T dO + â^T dY; and dV = Rk^T dO + k̃ dS_C + Ak^T dY, V's whole gradient."""
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    vv = i_v * BV + tl.arange(0, BV)
    n_chunks = tl.cdiv(L, C)
    dS = tl.zeros((BK, BV), dtype=tl.float32)  # none after the last chunk
    for j in range(n_chunks):
        i_c = n_chunks - 1 - j
        tl.store(_chunk_ptrs(dstates, i_bh, n_chunks, i_c, tl.arange(0, BK), vv, BK, VP),
                 dS.to(dstates.dtype.element_ty))
        ahat, rhat, btil, ktil, last, do, T, Rb, Rk, Ak, t, vmask = _chain_step(
            r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, do_ptr, t_ptr, i_bh, i_c, n_chunks, vv, L, H, K, V, BK, C, PRECISION)
        dSA = tl.dot(tl.trans(Rb), do, input_precision=PRECISION) + tl.dot(btil, dS, input_precision=PRECISION)
        dY = tl.dot(tl.trans(T), dSA, input_precision=PRECISION)
        tl.store(_chunk_ptrs(dy_ptr, i_bh, n_chunks, i_c, tl.arange(0, C), vv, C, VP), dY.to(dy_ptr.dtype.element_ty))
        dv = (tl.dot(tl.trans(Rk), do, input_precision=PRECISION) + tl.dot(ktil, dS, input_precision=PRECISION)
              + tl.dot(tl.trans(Ak), dY, input_precision=PRECISION))
        _put(dv_ptr, dv, i_bh // H, i_bh % H, t, vv, L, H, V, vmask)
        dS = (tl.exp(last)[:, None] * dS + tl.dot(tl.trans(rhat), do, input_precision=PRECISION)
              + tl.dot(tl.trans(ahat), dY, input_precision=PRECISION))


@triton.jit
def _rwkv7_chunk_key_grads_kernel(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, do_ptr, states, dstates, sa_ptr, dy_ptr,
                                  dr_ptr, dw_ptr, dk_ptr, da_ptr, db_ptr, L, H, K, V, VP, BK: tl.constexpr,
                                  BKG: tl.constexpr, BV: tl.constexpr, BVG: tl.constexpr, C: tl.constexpr,
                                  PRECISION: tl.constexpr):
    """The key side's gradients (r, w, k, a, b) of chunk i_c at key columns kk from its S_0, dS_C, SA and dY, one
    program per (chunk, batch and head, block of BKG key columns; all of V, BV >= V, in blocks of BVG columns): every
    product contracts over V, or over the chunk's steps, never over K. Written into contiguous tensors of the inputs'
    shapes."""
    i_c, i_bh, i_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    n_chunks = tl.num_programs(0)
    kk = i_k * BKG + tl.arange(0, BKG)
    ahat, bhat, khat, rhat, btil, ktil, cw, cwp, last, t, kmask = _chunk_rows(
        r_ptr, w_ptr, k_ptr, a_ptr, b_ptr, i_b, i_h, i_c, kk, L, H, K, C)
    tt = tl.arange(0, C)
    # the products that contract over V, summed over its blocks: the [C, C] matrices' gradients (Rb, Rk in
    # O = r̂ S_0 + Rb SA + Rk V; A, Ak in Y = (A SA +) Ak V + â S_0), b̃'s and k̃'s (through S_C = diag(exp(cw_C)) S_0
    # + b̃^T SA + k̃^T V), the S_0 terms of r̂'s and â's (through O and Y), and S_0's and dS_C's product for cw_C
    dRb = tl.zeros((C, C), dtype=tl.float32)
    dRk = tl.zeros((C, C), dtype=tl.float32)
    dA = tl.zeros((C, C), dtype=tl.float32)
    dAk = tl.zeros((C, C), dtype=tl.float32)
    dbtil = tl.zeros((C, BKG), dtype=tl.float32)
    dktil = tl.zeros((C, BKG), dtype=tl.float32)
    drhat = tl.zeros((C, BKG), dtype=tl.float32)
    dahat = tl.zeros((C, BKG), dtype=tl.float32)
    sdS = tl.zeros((BKG,), dtype=tl.float32)
    for i_v in range(0, BV, BVG):
        vv = i_v + tl.arange(0, BVG)
        vmask = (t[:, None] < L) & (vv[None, :] < V)
        v = _rows(v_ptr, i_b, i_h, t, vv, L, H, V, vmask)
        do = _rows(do_ptr, i_b, i_h, t, vv, L, H, V, vmask)
        SA = tl.load(_chunk_ptrs(sa_ptr, i_bh, n_chunks, i_c, tt, vv, C, VP)).to(tl.float32)
        dY = tl.load(_chunk_ptrs(dy_ptr, i_bh, n_chunks, i_c, tt, vv, C, VP)).to(tl.float32)
        S = tl.load(_chunk_ptrs(states, i_bh, n_chunks, i_c, kk, vv, BK, VP)).to(tl.float32)
        dS = tl.load(_chunk_ptrs(dstates, i_bh, n_chunks, i_c, kk, vv, BK, VP)).to(tl.float32)
        dRb += tl.dot(do, tl.trans(SA), input_precision=PRECISION)
        dRk += tl.dot(do, tl.trans(v), input_precision=PRECISION)
        dA += tl.dot(dY, tl.trans(SA), input_precision=PRECISION)
        dAk += tl.dot(dY, tl.trans(v), input_precision=PRECISION)
        dbtil += tl.dot(SA, tl.trans(dS), input_precision=PRECISION)
        dktil += tl.dot(v, tl.trans(dS), input_precision=PRECISION)
        drhat += tl.dot(do, tl.trans(S), input_precision=PRECISION)
        dahat += tl.dot(dY, tl.trans(S), input_precision=PRECISION)
        sdS += tl.sum(dS * S, axis=1)
    dRb = _lower(dRb, C, False)
    dRk = _lower(dRk, C, False)
    dA = _lower(dA, C, True)
    dAk = _lower(dAk, C, True)
    # then A = â b̂^T, Ak = â k̂^T, Rb = r̂ b̂^T, Rk = r̂ k̂^T
    drhat += tl.dot(dRb, bhat, input_precision=PRECISION) + tl.dot(dRk, khat, input_precision=PRECISION)
    dahat += tl.dot(dA, bhat, input_precision=PRECISION) + tl.dot(dAk, khat, input_precision=PRECISION)
    dbhat = (tl.dot(tl.trans(dA), ahat, input_precision=PRECISION)
             + tl.dot(tl.trans(dRb), rhat, input_precision=PRECISION))
    dkhat = (tl.dot(tl.trans(dAk), ahat, input_precision=PRECISION)
             + tl.dot(tl.trans(dRk), rhat, input_precision=PRECISION))
    # back to the inputs: each hat is its input times an exponential of cw (or cw_{t-1}, or cw_C - cw)
    ahat_d = dahat * ahat
    tilde_d = dbtil * btil + dktil * ktil
    dcw = drhat * rhat - dbhat * bhat - dkhat * khat - tilde_d
    dlast = tl.exp(last) * sdS + tl.sum(tilde_d, axis=0)
    # cw_t sums w up to t, cw_{t-1} before t, cw_C the whole chunk
    dw = tl.cumsum(dcw, axis=0, reverse=True) + tl.cumsum(ahat_d, axis=0, reverse=True) - ahat_d + dlast[None, :]
    back = tl.exp(-cw)
    tail = tl.exp(last[None, :] - cw)
    _put(dr_ptr, drhat * tl.exp(cw), i_b, i_h, t, kk, L, H, K, kmask)
    _put(dw_ptr, dw, i_b, i_h, t, kk, L, H, K, kmask)
    _put(dk_ptr, dkhat * back + dktil * tail, i_b, i_h, t, kk, L, H, K, kmask)
    _put(da_ptr, dahat * tl.exp(cwp), i_b, i_h, t, kk, L, H, K, kmask)
    _put(db_ptr, dbhat * back + dbtil * tail, i_b, i_h, t, kk, L, H, K, kmask)


class Launch(NamedTuple):
    """How the kernels are launched: value columns per program of the two chains through the chunks (a power of
    two, at least 16), warps per program of the chains, the matmuls' precision ("tf32" or "ieee"), T's precision
    ("ieee", or "tf32x3": three tf32 products, float32's accuracy), the warps of T's kernel and of the key side's
    gradients' (None: the chains'), the key columns per program of the key side's gradients (a power of two, at
    least 16; K padded where that is fewer), the dtype of what the chains keep for the key side's gradients
    (``states_dtype``: each chunk's S_0, SA, dS_C and dY; float32, or bf16 for half their bytes, as fla's chunk
    kernels keep theirs: the chains walk in float32 and round only what they store, so o and dv do not change), and
    the value columns the key side's gradients read at a time, summing their products over V block by block (a
    power of two, at least 16; None: all of V at once)."""
    block_v: int = 64
    num_warps: int = 4
    precision: str = "tf32"
    inverse_precision: str = "tf32x3"
    intra_warps: int | None = 1
    grads_warps: int | None = 4
    grads_block_k: int = 64
    states_dtype: torch.dtype = torch.bfloat16
    grads_block_v: int | None = 32

    def warps(self, field: str) -> int:
        """Warps of T's kernel ("intra_warps") or the gradients' ("grads_warps"): its own field, else the chains'."""
        warps = getattr(self, field)
        return self.num_warps if warps is None else warps


# The launch the dispatcher (``zoo.kernels.rwkv7``) runs.
LAUNCH = Launch()


def check_launch(launch: Launch) -> None:
    """A ValueError naming the field of ``launch`` the kernels cannot take, and what they take."""
    if launch.precision not in ("tf32", "ieee"):
        raise ValueError(f"rwkv7_chunk: launch.precision {launch.precision!r}, expected 'tf32' or 'ieee'")
    if launch.inverse_precision not in ("ieee", "tf32x3"):
        raise ValueError(f"rwkv7_chunk: launch.inverse_precision {launch.inverse_precision!r}, expected 'ieee' or "
                         "'tf32x3'")
    for field in ("block_v", "grads_block_k", "grads_block_v"):
        size = getattr(launch, field)
        if size is None and field == "grads_block_v":
            continue
        if not isinstance(size, int) or size < 16 or size & (size - 1):
            raise ValueError(f"rwkv7_chunk: launch.{field} {size!r}, expected a power of two >= 16"
                             + (" or None" if field == "grads_block_v" else ""))
    for field in ("num_warps", "intra_warps", "grads_warps"):
        warps = getattr(launch, field)
        if warps is None and field != "num_warps":
            continue
        if not isinstance(warps, int) or warps < 1 or warps & (warps - 1):
            raise ValueError(f"rwkv7_chunk: launch.{field} {warps!r}, expected a power of two >= 1"
                             + ("" if field == "num_warps" else " or None"))
    check_states_dtype(launch.states_dtype)


def _blocks(K: int, V: int, launch: Launch) -> tuple[int, int, int, int]:
    """(BK, BV of the chains, VP, key columns a gradient program): K and V padded to powers of two (at least 16, the
    matmuls' least size)."""
    BK, VP = max(16, triton.next_power_of_2(K)), max(16, triton.next_power_of_2(V))
    return BK, min(VP, launch.block_v), VP, min(BK, launch.grads_block_k)


def _sizes(r: torch.Tensor, v: torch.Tensor, launch: Launch):
    """(B, L, H, K, V, n_chunks) of (B, L, H, K) r and (B, L, H, V) v, and ``_blocks``' four sizes."""
    Bsz, L, H, K = r.shape
    V = v.shape[-1]
    return (Bsz, L, H, K, V, triton.cdiv(L, CHUNK)), _blocks(K, V, launch)


# One function per kernel: the autograd Function runs them in order, and the kernel bench times each alone. Inputs
# contiguous, as ``rwkv7_chunk`` makes them.

def chunk_inverses(r, w, k, v, a, b, launch: Launch = LAUNCH) -> torch.Tensor:
    """T of every chunk: [B H, n_chunks, C, C] float32."""
    (Bsz, L, H, K, V, n_chunks), (BK, BV, VP, BKG) = _sizes(r, v, launch)
    T = torch.empty(Bsz * H, n_chunks, CHUNK, CHUNK, device=r.device, dtype=torch.float32)
    _rwkv7_chunk_inverse_kernel[(n_chunks, Bsz * H)](r, w, k, a, b, T, L, H, K, BK=BK, C=CHUNK,
                                                     PRECISION=launch.inverse_precision,
                                                     num_warps=launch.warps("intra_warps"))
    return T


def forward_chain(r, w, k, v, a, b, T, launch: Launch = LAUNCH) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chain through the chunks: (o (B, L, H, V) in r's dtype, each chunk's S_0 [B H, n_chunks, BK, VP] and SA
    [B H, n_chunks, C, VP] in ``launch.states_dtype``)."""
    (Bsz, L, H, K, V, n_chunks), (BK, BV, VP, BKG) = _sizes(r, v, launch)
    states = torch.empty(Bsz * H, n_chunks, BK, VP, device=r.device, dtype=launch.states_dtype)
    SA = torch.empty(Bsz * H, n_chunks, CHUNK, VP, device=r.device, dtype=launch.states_dtype)
    o = torch.empty(Bsz, L, H, V, device=r.device, dtype=r.dtype)
    _rwkv7_chunk_states_kernel[(VP // BV, Bsz * H)](r, w, k, v, a, b, T, states, SA, o, L, H, K, V, VP, BK=BK, BV=BV,
                                                    C=CHUNK, PRECISION=launch.precision, num_warps=launch.num_warps)
    return o, states, SA


def reverse_chain(r, w, k, v, a, b, do, T, launch: Launch = LAUNCH) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chain through the chunks in reverse: (dv in v's dtype, each chunk's dS_C [B H, n_chunks, BK, VP] and dY
    [B H, n_chunks, C, VP] in ``launch.states_dtype``)."""
    (Bsz, L, H, K, V, n_chunks), (BK, BV, VP, BKG) = _sizes(r, v, launch)
    dstates = torch.empty(Bsz * H, n_chunks, BK, VP, device=r.device, dtype=launch.states_dtype)
    dY = torch.empty(Bsz * H, n_chunks, CHUNK, VP, device=r.device, dtype=launch.states_dtype)
    dv = torch.empty_like(v)
    _rwkv7_chunk_grad_states_kernel[(VP // BV, Bsz * H)](r, w, k, a, b, do, T, dstates, dY, dv, L, H, K, V, VP, BK=BK,
                                                         BV=BV, C=CHUNK, PRECISION=launch.precision,
                                                         num_warps=launch.num_warps)
    return dv, dstates, dY


def key_grads(r, w, k, v, a, b, do, states, dstates, SA, dY, launch: Launch = LAUNCH) -> tuple[torch.Tensor, ...]:
    """The key side's gradients (dr, dw, dk, da, db), each in its input's dtype."""
    (Bsz, L, H, K, V, n_chunks), (BK, BV, VP, BKG) = _sizes(r, v, launch)
    dr, dw, dk, da, db = (torch.empty_like(x) for x in (r, w, k, a, b))
    _rwkv7_chunk_key_grads_kernel[(n_chunks, Bsz * H, BK // BKG)](r, w, k, v, a, b, do, states, dstates, SA, dY, dr, dw,
                                                                  dk, da, db, L, H, K, V, VP, BK=BK, BKG=BKG, BV=VP,
                                                                  BVG=min(VP, launch.grads_block_v or VP), C=CHUNK,
                                                                  PRECISION=launch.precision,
                                                                  num_warps=launch.warps("grads_warps"))
    return dr, dw, dk, da, db


class RWKV7ChunkFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, r, w, k, v, a, b, launch):
        T = chunk_inverses(r, w, k, v, a, b, launch)
        o, states, SA = forward_chain(r, w, k, v, a, b, T, launch)
        ctx.save_for_backward(r, w, k, v, a, b, states, T, SA)
        ctx.launch = launch
        return o

    @staticmethod
    def backward(ctx, do):
        r, w, k, v, a, b, states, T, SA = ctx.saved_tensors
        do = do.contiguous()
        dv, dstates, dY = reverse_chain(r, w, k, v, a, b, do, T, ctx.launch)
        dr, dw, dk, da, db = key_grads(r, w, k, v, a, b, do, states, dstates, SA, dY, ctx.launch)
        return dr, dw, dk, dv, da, db, None


@not_compiled  # hand-written kernels: nothing for Inductor to fuse
def rwkv7_chunk(r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                b: torch.Tensor, launch: Launch = LAUNCH) -> torch.Tensor:
    """``rwkv7_naive``'s result by the chunked Triton kernels above, computed in float32, for decays bounded below
    by a w_min that :func:`fits` (the caller's promise: the kernels do not check, which would cost a host sync).

    r, w, k, a, b: (B, L, H, K), w the log decays (< 0); v: (B, L, H, V) -> o: (B, L, H, V) in r's dtype (as fla's
    ``chunk_rwkv7`` returns it: bf16 inputs give a bf16 o, half the bytes written and read back). Inputs may be any
    float dtype (the math is float32) and strides (made contiguous: the kernels read that layout); any K and V
    (padded to powers of two, at least 16, inside). The gradients come back in the inputs' dtypes.
    """
    check_launch(launch)
    return RWKV7ChunkFunction.apply(*(x.contiguous() for x in (r, w, k, v, a, b)), launch)
