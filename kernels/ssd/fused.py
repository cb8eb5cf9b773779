"""Mamba-2's SSD in Triton: a forward that walks the chunks with the state in registers, and a backward in three
kernels: a reverse walk that carries only the state's gradient, then two kernels with one program per chunk.

Per head, with log decays a_t = dt_t A, G_t their cumulative sum inside a chunk (G_Q through the whole chunk),
W[t, s] = exp(G_t - G_s) dt_s for s <= t (else 0) and w_s = exp(G_Q - G_s) dt_s, a chunk of Q steps with the
state S_in (N, P) entering it gives::

    y   = ((C B^T) * W) x + (C * exp(G)) S_in + D x                       (Q, P)
    S_out = exp(G_Q) S_in + (B * w)^T x                                    (N, P)

The forward stores every chunk's S_in. The backward, in three kernels launched in this order:

1. ``_ssd_dstate_kernel`` walks the chunks in reverse and stores each chunk's dS = dL/dS_out
   (dS_in = exp(G_Q) dS + (C * exp(G))^T dy), and <dS, S_in>;
2. ``_ssd_bwd_dbc_kernel``, one program a chunk, summing over the heads in registers:
       dC    = ((dy x^T) * W) B + exp(G) * (dy S_in^T)
       dB^T  = C^T ((dy x^T) * W) + (dS x^T) * w                          (written transposed)
   and per head the rows of (C exp(G) S_in) * dy summed, from the same dy S_in^T;
3. ``_ssd_bwd_dx_kernel``, one program a chunk and head:
       dx    = ((B C^T) * W^T) dy + w * (B dS) + D dy
       dG_t  = sum_s E[t, s] - sum_s E[s, t] + rowsum((C exp(G) S_in) * dy)_t - w_t rowsum((B dS) * x)_t,
               E = (dy x^T) * (C B^T) * W, and <dS, S_out> = exp(G_Q) <dS, S_in> + sum_s w_s rowsum((B dS) * x)_s
               on the whole chunk's G_Q
       da    = the reverse cumulative sum of dG inside the chunk;  ddt = da A + dt's own terms in W and w;
       dA    = sum da dt,  dD = sum dy x.

Splitting the backward this way keeps few tiles live in each program, and takes S_in out of the largest one: a
single kernel that carried dS through the chunks and computed everything held about ten [N, P] or [Q, N] float32
tiles at once, and took ten times the forward's time on an H100 (``results/SPEED.md``).

Every transposed operand is loaded transposed from memory (no transpose of a computed tile: on Hopper with
Triton 3.4 to 3.7 that pattern miscompiles, fla issue #640). B and C are shared by the heads: the dB / dC program
of a chunk loops over the heads and sums their shares in registers. Where P spans several programs, the shares of
dB, dC and dt's gradient go through float32 partials that one sum finishes; dA and dD likewise. No atomics: the
same bits on every run.

Precision, as ``chunked.py`` and mamba-ssm's chunked kernels: with x in bf16 or fp16 the matmul operands are cast to
x's dtype (tensor cores, float32 accumulation), and the stored states (S_in, dS) are in x's dtype, the dtype the
forward's matmul reads them in; the decays, their exps and the carried states stay float32. Float32 x runs
everything in IEEE float32. Shapes: x [Bt, L, H, P]; dt [Bt, L, H]; A [H]; B, C [Bt, L, N] (any strides);
D [H] or None.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.partial_sums import sum_blocks

CHUNK = 64  # steps a chunk: the (Q, Q) tiles of the quadratic form
BLOCK_P = 64  # head dims a program
# (num_warps, num_stages) of each kernel: forward, dS walk, dx and dt's gradient, dB and dC
LAUNCH = {"fwd": (4, 1), "dstate": (4, 1), "dx": (4, 1), "dbc": (8, 2)}


@triton.jit
def _tile(ptr, rows, cols, row_ok, col_ok, s_row, s_col):
    """ptr[rows, cols] (any strides) in its own dtype, zero outside the masks."""
    return tl.load(ptr + rows[:, None] * s_row + cols[None, :] * s_col, mask=row_ok[:, None] & col_ok[None, :],
                   other=0.0)


@triton.jit
def _chunk_decays(DT, A_h, t, t_ok, s_dt_t, Q: tl.constexpr):
    """(dt [Q], G [Q] the cumulative log decay inside the chunk, G_Q the chunk's whole log decay): dt is 0 past the
    sequence's end, so those steps decay nothing. The cumulative sum is a masked row sum (no ``tl.cumsum``)."""
    dt = tl.load(DT + t * s_dt_t, mask=t_ok, other=0.0).to(tl.float32)
    a = dt * A_h
    i = tl.arange(0, Q)
    g = tl.sum(tl.where(i[None, :] <= i[:, None], a[None, :], 0.0), axis=1)
    return dt, g, tl.sum(a, axis=0)


@triton.jit
def _walk_indices(bh, pb, H, N, P, BN: tl.constexpr, BP: tl.constexpr):
    """The indices of a program that walks one sequence and head: (sequence b, head h, state rows n, head dims p,
    their masks)."""
    n = tl.arange(0, BN)
    p = pb * BP + tl.arange(0, BP)
    return (bh // H).to(tl.int64), bh % H, n, p, n < N, p < P


@triton.jit
def _ssd_fwd_kernel(X, DT, A, B, C, D, Y, STATES, L, H, N, P,
                    sx_b, sx_t, sx_h, sx_p, sdt_b, sdt_t, sdt_h, sb_b, sb_t, sb_n, sc_b, sc_t, sc_n,
                    sy_b, sy_t, sy_h, sy_p, HAS_D: tl.constexpr, Q: tl.constexpr, BN: tl.constexpr,
                    BP: tl.constexpr, PREC: tl.constexpr):
    """One program per (sequence and head, block of P): y, and each chunk's entering state in STATES."""
    bh, pb = tl.program_id(0), tl.program_id(1)
    b, h, n, p, n_ok, p_ok = _walk_indices(bh, pb, H, N, P, BN, BP)
    mm = X.dtype.element_ty
    X += b * sx_b + h * sx_h
    Y += b * sy_b + h * sy_h
    DT += b * sdt_b + h * sdt_h
    B += b * sb_b
    C += b * sc_b
    A_h = tl.load(A + h).to(tl.float32)
    D_h = 0.0
    if HAS_D:
        D_h = tl.load(D + h).to(tl.float32)
    n_chunks = tl.cdiv(L, Q)
    STATES += (bh.to(tl.int64) * n_chunks * N) * P
    i = tl.arange(0, Q)
    S = tl.zeros([BN, BP], dtype=tl.float32)
    for c in range(n_chunks):
        t = c * Q + i
        t_ok = t < L
        dt, g, g_all = _chunk_decays(DT, A_h, t, t_ok, sdt_t, Q)
        x = _tile(X, t, p, t_ok, p_ok, sx_t, sx_p).to(mm)
        Ct = _tile(C, t, n, t_ok, n_ok, sc_t, sc_n).to(mm)  # [Q, BN]
        Bn = _tile(B, n, t, n_ok, t_ok, sb_n, sb_t).to(mm)  # [BN, Q]: B^T
        W = tl.where(i[None, :] <= i[:, None], tl.exp(g[:, None] - g[None, :]) * dt[None, :], 0.0)
        scores = tl.dot(Ct, Bn, input_precision=PREC) * W
        y = tl.dot(scores.to(mm), x, input_precision=PREC)
        S_mm = S.to(mm)
        y += tl.exp(g)[:, None] * tl.dot(Ct, S_mm, input_precision=PREC)
        if HAS_D:
            y += D_h * x.to(tl.float32)
        tl.store(Y + t[:, None] * sy_t + p[None, :] * sy_p, y.to(Y.dtype.element_ty), mask=t_ok[:, None] & p_ok[None, :])
        tl.store(STATES + (c * N + n[:, None]) * P + p[None, :], S_mm, mask=n_ok[:, None] & p_ok[None, :])
        w = tl.exp(g_all - g) * dt
        S = tl.exp(g_all) * S + tl.dot(Bn, (x.to(tl.float32) * w[:, None]).to(mm), input_precision=PREC)


@triton.jit
def _ssd_dstate_kernel(DT, A, C, DY, STATES, DSTATES, DOT, L, H, N, P, sdt_b, sdt_t, sdt_h, sc_b, sc_t, sc_n,
                       sdy_b, sdy_t, sdy_h, sdy_p, Q: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
                       PREC: tl.constexpr):
    """One program per (sequence and head, block of P) walks the chunks in reverse: each chunk's dS = dL/dS_out,
    and <dS, S_in> (its share of the gradient of the chunk's whole decay) into DOT [blocks of P, Bt H, chunks]."""
    bh, pb = tl.program_id(0), tl.program_id(1)
    b, h, n, p, n_ok, p_ok = _walk_indices(bh, pb, H, N, P, BN, BP)
    mm = DSTATES.dtype.element_ty
    DY += b * sdy_b + h * sdy_h
    DT += b * sdt_b + h * sdt_h
    C += b * sc_b
    A_h = tl.load(A + h).to(tl.float32)
    n_chunks = tl.cdiv(L, Q)
    DSTATES += (bh.to(tl.int64) * n_chunks * N) * P
    STATES += (bh.to(tl.int64) * n_chunks * N) * P
    DOT += (pb * tl.num_programs(0) + bh) * n_chunks
    i = tl.arange(0, Q)
    dS = tl.zeros([BN, BP], dtype=tl.float32)
    for k in range(n_chunks):
        c = n_chunks - 1 - k
        tl.store(DSTATES + (c * N + n[:, None]) * P + p[None, :], dS.to(mm), mask=n_ok[:, None] & p_ok[None, :])
        S_in = _tile(STATES + c * N * P, n, p, n_ok, p_ok, P, 1).to(tl.float32)
        tl.store(DOT + c, tl.sum(tl.sum(dS * S_in, axis=1), axis=0))
        t = c * Q + i
        t_ok = t < L
        dt, g, g_all = _chunk_decays(DT, A_h, t, t_ok, sdt_t, Q)
        Cn = _tile(C, n, t, n_ok, t_ok, sc_n, sc_t).to(mm)  # [BN, Q]
        dy = _tile(DY, t, p, t_ok, p_ok, sdy_t, sdy_p).to(tl.float32)
        dS = tl.exp(g_all) * dS + tl.dot(Cn, (dy * tl.exp(g)[:, None]).to(mm), input_precision=PREC)


@triton.jit
def _chunk_indices(bc, pb, L, N, P, Q: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr):
    """The indices of a per-chunk program: (chunks, sequence b, chunk c, state rows n, head dims p, their masks, the
    chunk's steps i and t = c Q + i, t's mask)."""
    n_chunks = tl.cdiv(L, Q)
    b, c = (bc // n_chunks).to(tl.int64), bc % n_chunks
    n = tl.arange(0, BN)
    p = pb * BP + tl.arange(0, BP)
    i = tl.arange(0, Q)
    t = c * Q + i
    return n_chunks, b, c, n, p, n < N, p < P, i, t, t < L


@triton.jit
def _ssd_bwd_dx_kernel(X, DT, A, B, C, D, DY, DSTATES, DOT, CSDY, DX, DDT, DA, DD, L, H, N, P, Bt,
                       sx_b, sx_t, sx_h, sx_p, sdt_b, sdt_t, sdt_h, sb_b, sb_t, sb_n, sc_b, sc_t, sc_n,
                       sdy_b, sdy_t, sdy_h, sdy_p, HAS_D: tl.constexpr, Q: tl.constexpr, BN: tl.constexpr,
                       BP: tl.constexpr, PREC: tl.constexpr):
    """One program per (sequence and chunk, head, block of P): dx, and dt's, A's and D's gradients, with the two
    terms of the decays' gradient that hold S_in from the kernels before (DOT: <dS, S_in>; CSDY: the rows of
    (C exp(G) S_in) * dy, summed).

    The score terms are computed transposed ([s, t]: B_s . C_t), from operands loaded in that orientation."""
    bc, h, pb = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    n_chunks, b, c, n, p, n_ok, p_ok, i, t, t_ok = _chunk_indices(bc, pb, L, N, P, Q, BN, BP)
    mm = X.dtype.element_ty
    A_h = tl.load(A + h).to(tl.float32)
    dt, g, g_all = _chunk_decays(DT + b * sdt_b + h * sdt_h, A_h, t, t_ok, sdt_t, Q)
    w = tl.exp(g_all - g) * dt
    X += b * sx_b + h * sx_h
    DY += b * sdy_b + h * sdy_h
    x = _tile(X, t, p, t_ok, p_ok, sx_t, sx_p).to(tl.float32)  # [Q, BP]
    dy = _tile(DY, t, p, t_ok, p_ok, sdy_t, sdy_p)  # [Q, BP]
    dyT = _tile(DY, p, t, p_ok, t_ok, sdy_p, sdy_t).to(mm)  # [BP, Q]
    Bs = _tile(B + b * sb_b, t, n, t_ok, n_ok, sb_t, sb_n).to(mm)  # [Q (s), BN]
    Cn = _tile(C + b * sc_b, n, t, n_ok, t_ok, sc_n, sc_t).to(mm)  # [BN, Q (t)]
    dS = _tile(DSTATES + ((b * H + h) * n_chunks + c) * N * P, n, p, n_ok, p_ok, P, 1)  # [BN, BP] in mm
    upper = i[:, None] <= i[None, :]  # [s, t]: s <= t
    decayT = tl.where(upper, tl.exp(g[None, :] - g[:, None]), 0.0)  # [s, t]
    BC = tl.dot(Bs, Cn, input_precision=PREC)  # [s, t]
    BdS = tl.dot(Bs, dS, input_precision=PREC)  # [Q (s), BP]
    dx = tl.dot((BC * decayT * dt[:, None]).to(mm), dy.to(mm), input_precision=PREC) + w[:, None] * BdS
    dy = dy.to(tl.float32)
    if HAS_D:
        dx += tl.load(D + h).to(tl.float32) * dy
        tl.store(DD + (pb * Bt * n_chunks + bc) * H + h, tl.sum(tl.sum(dy * x, axis=1), axis=0))
    tl.store(DX + (((b * L + t[:, None]) * H + h) * P + p[None, :]), dx.to(DX.dtype.element_ty),
             mask=t_ok[:, None] & p_ok[None, :])  # dx is contiguous [Bt, L, H, P]
    # the log decays' gradient: every term that holds an exp(G)
    FT = tl.dot(x.to(mm), dyT, input_precision=PREC) * BC * decayT  # [s, t]: the score's gradient times its value
    ET = FT * dt[:, None]
    R = tl.sum(BdS * x, axis=1)  # [Q]: B_s^T dS x_s
    csdy = tl.load(CSDY + ((pb * Bt + b) * L + t) * H + h, mask=t_ok, other=0.0)
    dG = tl.sum(ET, axis=0) - tl.sum(ET, axis=1) + csdy - w * R
    # dL/dG_Q = <dS, S_out>, S_out = exp(G_Q) S_in + sum_s w_s B_s x_s^T: G_Q is the sum of every a of the chunk
    dot = tl.load(DOT + (pb * Bt * H + b * H + h) * n_chunks + c)
    whole = tl.exp(g_all) * dot + tl.sum(w * R, axis=0)
    da = tl.sum(tl.where(upper, dG[None, :], 0.0), axis=1) + whole  # [s]: sum over t >= s of dG_t
    ddt = da * A_h + tl.sum(FT, axis=1) + tl.exp(g_all - g) * R
    tl.store(DDT + ((pb * Bt + b) * L + t) * H + h, ddt, mask=t_ok)  # [blocks of P, Bt, L, H]
    tl.store(DA + (pb * Bt * n_chunks + bc) * H + h, tl.sum(da * dt, axis=0))


@triton.jit
def _ssd_bwd_dbc_kernel(X, DT, A, B, C, DY, STATES, DSTATES, DB, DC, CSDY, L, H, N, P, Bt,
                        sx_b, sx_t, sx_h, sx_p, sdt_b, sdt_t, sdt_h, sb_b, sb_t, sb_n, sc_b, sc_t, sc_n,
                        sdy_b, sdy_t, sdy_h, sdy_p, Q: tl.constexpr, BN: tl.constexpr, BP: tl.constexpr,
                        PREC: tl.constexpr):
    """One program per (sequence and chunk, block of P): dB and dC, summed over the heads in registers; and per
    head the rows of (C exp(G) S_in) * dy summed, a term of the decays' gradient, into CSDY [blocks of P, Bt, L,
    H]."""
    bc, pb = tl.program_id(0), tl.program_id(1)
    n_chunks, b, c, n, p, n_ok, p_ok, i, t, t_ok = _chunk_indices(bc, pb, L, N, P, Q, BN, BP)
    mm = X.dtype.element_ty
    Bt_ = _tile(B + b * sb_b, t, n, t_ok, n_ok, sb_t, sb_n).to(mm)  # [Q (s), BN]
    Cn = _tile(C + b * sc_b, n, t, n_ok, t_ok, sc_n, sc_t).to(mm)  # [BN, Q (t)]
    below = i[None, :] <= i[:, None]  # [t, s]: s <= t
    dC = tl.zeros([Q, BN], dtype=tl.float32)
    dBT = tl.zeros([BN, Q], dtype=tl.float32)
    for h in range(H):
        A_h = tl.load(A + h).to(tl.float32)
        dt, g, g_all = _chunk_decays(DT + b * sdt_b + h * sdt_h, A_h, t, t_ok, sdt_t, Q)
        dy = _tile(DY + b * sdy_b + h * sdy_h, t, p, t_ok, p_ok, sdy_t, sdy_p).to(mm)  # [Q, BP]
        xT = _tile(X + b * sx_b + h * sx_h, p, t, p_ok, t_ok, sx_p, sx_t).to(mm)  # [BP, Q]
        state = ((b * H + h) * n_chunks + c) * N * P
        S_inT = _tile(STATES + state, p, n, p_ok, n_ok, 1, P)  # [BP, BN]
        dS = _tile(DSTATES + state, n, p, n_ok, p_ok, P, 1)  # [BN, BP]
        W = tl.where(below, tl.exp(g[:, None] - g[None, :]) * dt[None, :], 0.0)  # [t, s]
        dyxW = (tl.dot(dy, xT, input_precision=PREC) * W).to(mm)  # [t, s]: (dy_t . x_s) W[t, s]
        dC += tl.dot(dyxW, Bt_, input_precision=PREC)
        dyS = tl.exp(g)[:, None] * tl.dot(dy, S_inT, input_precision=PREC)  # [t, n]: exp(G_t) dy_t S_in^T
        dC += dyS
        # C in its row layout, loaded again for each head (from L2) rather than held across the loop
        Ct = _tile(C + b * sc_b, t, n, t_ok, n_ok, sc_t, sc_n).to(tl.float32)  # [Q (t), BN]
        tl.store(CSDY + ((pb * Bt + b) * L + t) * H + h, tl.sum(dyS * Ct, axis=1), mask=t_ok)
        dBT += tl.dot(Cn, dyxW, input_precision=PREC)
        dBT += tl.dot(dS, xT, input_precision=PREC) * (tl.exp(g_all - g) * dt)[None, :]
    base = (pb * Bt + b) * L * N  # [blocks of P, Bt, L, N]
    tl.store(DC + base + t[:, None] * N + n[None, :], dC.to(DC.dtype.element_ty), mask=t_ok[:, None] & n_ok[None, :])
    tl.store(DB + base + t[None, :] * N + n[:, None], dBT.to(DB.dtype.element_ty), mask=n_ok[:, None] & t_ok[None, :])


def _sizes(x: torch.Tensor, N: int, chunk: int, block_p: int) -> tuple[int, int, int, int]:
    """(BN, Q, BP, blocks of P)."""
    P = x.shape[-1]
    BP = max(16, min(block_p, triton.next_power_of_2(P)))
    return max(16, triton.next_power_of_2(N)), max(16, chunk), BP, triton.cdiv(P, BP)


def _precision(x: torch.Tensor) -> str:
    return "ieee" if x.dtype == torch.float32 else "tf32"  # (tf32 is ignored for bf16 / fp16 operands)


def _launch(launch: dict, kernel: str) -> dict:
    num_warps, num_stages = launch[kernel]
    return dict(num_warps=num_warps, num_stages=num_stages)


class SSDFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dt, A, B, C, D, chunk, block_p, launch):
        Bt, L, H, P = x.shape
        N = B.shape[-1]
        BN, Q, BP, n_pb = _sizes(x, N, chunk, block_p)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        states = torch.empty(Bt * H, triton.cdiv(L, Q), N, P, dtype=x.dtype, device=x.device)
        _ssd_fwd_kernel[(Bt * H, n_pb)](
            x, dt, A, B, C, D, y, states, L, H, N, P, *x.stride(), *dt.stride(), *B.stride(), *C.stride(),
            *y.stride(), HAS_D=D is not None, Q=Q, BN=BN, BP=BP, PREC=_precision(x), **_launch(launch, "fwd"))
        ctx.save_for_backward(x, dt, A, B, C, D, states)
        ctx.config = chunk, block_p, launch
        return y

    @staticmethod
    def backward(ctx, dy):
        x, dt, A, B, C, D, states = ctx.saved_tensors
        chunk, block_p, launch = ctx.config
        Bt, L, H, P = x.shape
        N = B.shape[-1]
        BN, Q, BP, n_pb = _sizes(x, N, chunk, block_p)
        n_chunks = triton.cdiv(L, Q)
        sizes = dict(Q=Q, BN=BN, BP=BP, PREC=_precision(x))
        f32 = dict(dtype=torch.float32, device=x.device)
        dstates = torch.empty_like(states)
        dot = torch.empty(n_pb, Bt * H, n_chunks, **f32)
        _ssd_dstate_kernel[(Bt * H, n_pb)](
            dt, A, C, dy, states, dstates, dot, L, H, N, P, *dt.stride(), *C.stride(), *dy.stride(), **sizes,
            **_launch(launch, "dstate"))
        strides = (*x.stride(), *dt.stride(), *B.stride(), *C.stride(), *dy.stride())
        # one block of P: the kernel writes dB and dC in their own dtypes, else float32 partials summed here
        dB, dC = (torch.empty(n_pb, Bt, L, N, dtype=t.dtype if n_pb == 1 else torch.float32, device=x.device)
                  for t in (B, C))
        csdy = torch.empty(n_pb, Bt, L, H, **f32)
        _ssd_bwd_dbc_kernel[(Bt * n_chunks, n_pb)](
            x, dt, A, B, C, dy, states, dstates, dB, dC, csdy, L, H, N, P, Bt, *strides, **sizes,
            **_launch(launch, "dbc"))
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        ddt = torch.empty(n_pb, Bt, L, H, **f32)
        dA, dD = torch.empty(n_pb, Bt * n_chunks, H, **f32), torch.empty(n_pb, Bt * n_chunks, H, **f32)
        _ssd_bwd_dx_kernel[(Bt * n_chunks, H, n_pb)](
            x, dt, A, B, C, D, dy, dstates, dot, csdy, dx, ddt, dA, dD, L, H, N, P, Bt, *strides,
            HAS_D=D is not None, **sizes, **_launch(launch, "dx"))
        return (dx, sum_blocks(ddt, dt.dtype), dA.sum((0, 1)).to(A.dtype), sum_blocks(dB, B.dtype),
                sum_blocks(dC, C.dtype), None if D is None else dD.sum((0, 1)).to(D.dtype), None, None, None)


def ssd_fused(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
              D: torch.Tensor | None = None, chunk: int = CHUNK, block_p: int = BLOCK_P,
              launch: dict | None = None) -> torch.Tensor:
    """``ssd_naive``'s result from the kernels above: x [Bt, L, H, P]; dt [Bt, L, H] > 0; A [H] < 0; B, C
    [Bt, L, N]; D [H] or None -> y [Bt, L, H, P] in x's dtype. ``chunk`` (a power of two, at least 16),
    ``block_p`` and ``launch`` (``LAUNCH``'s keys, each (num_warps, num_stages)) change only the speed (tests make the
    chunk small)."""
    if chunk < 16 or chunk & (chunk - 1):
        raise ValueError(f"ssd_fused: chunk={chunk} is not a power of two >= 16")
    unknown = sorted(set(launch or {}) - set(LAUNCH))
    if unknown:
        raise ValueError(f"ssd_fused: launch key(s) {unknown} are not valid: expected some of {sorted(LAUNCH)}")
    return SSDFunction.apply(x, dt, A, B, C, D, chunk, block_p, {**LAUNCH, **(launch or {})})
