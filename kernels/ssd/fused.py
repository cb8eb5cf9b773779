"""Mamba-2's SSD in two Triton kernels: a forward and a backward, each one program per (sequence, head, block of
head dims) walking the sequence's chunks in order (forward) or in reverse (backward) with the state in registers.

Per head, with log decays a_t = dt_t A, G_t their cumulative sum inside a chunk (G_Q through the whole chunk),
W[t, s] = exp(G_t - G_s) dt_s for s <= t (else 0) and w_s = exp(G_Q - G_s) dt_s, a chunk of Q steps with the
state S_in (N, P) entering it gives::

    y   = ((C B^T) * W) x + (C * exp(G)) S_in + D x                       (Q, P)
    S_out = exp(G_Q) S_in + (B * w)^T x                                    (N, P)

The backward carries dS = dL/dS_out from the last chunk to the first and recomputes everything else of a chunk
from its inputs and the S_in the forward stored (one (N, P) float32 state per chunk):

    dx    = ((B C^T) * W^T) dy + w * (B dS) + D dy
    dC    = ((dy x^T) * W) B + exp(G) * (dy S_in^T)
    dB^T  = C^T ((dy x^T) * W) + (dS x^T) * w                             (written transposed)
    dS_in = exp(G_Q) dS + (C * exp(G))^T dy
    dG_t  = sum_s E[t, s] - sum_s E[s, t] + rowsum((C exp(G) S_in) * dy)_t - w_t rowsum((B dS) * x)_t,
            E = (dy x^T) * (C B^T) * W, and <dS, S_out> on the whole chunk's G_Q,
    da    = the reverse cumulative sum of dG inside the chunk;  ddt = da A + dt's own terms in W and w;
    dA    = sum da dt,  dD = sum dy x.

Every transposed operand is loaded transposed from memory (no transpose of a computed tile: on Hopper with
Triton 3.4 to 3.7 that pattern miscompiles, fla issue #640). B and C are shared by the heads, so each program writes
its (head, block of head dims)'s share of dB and dC to a float32 partial that one sum finishes; dt's gradient is
summed over the blocks of head dims the same way, dA and dD over the sequences and blocks. No atomics: the same bits on every run.

Precision, as ``chunked.py``: with x in bf16 or fp16 the matmul operands are cast to x's dtype (tensor cores,
float32 accumulation); the decays, their exps and every state stay float32. Float32 x runs its matmuls in IEEE
float32. Shapes: x [Bt, L, H, P]; dt [Bt, L, H]; A [H]; B, C [Bt, L, N] (any strides); D [H] or None.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

CHUNK = 64  # steps a chunk: the (Q, Q) tiles of the quadratic form
BLOCK_P = 64  # head dims a program
NUM_WARPS, NUM_STAGES = 4, 2


@triton.jit
def _tile(ptr, rows, cols, row_ok, col_ok, s_row, s_col):
    """ptr[rows, cols] (any strides) as float32, zero outside the masks."""
    return tl.load(ptr + rows[:, None] * s_row + cols[None, :] * s_col, mask=row_ok[:, None] & col_ok[None, :],
                   other=0.0).to(tl.float32)


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
def _ssd_fwd_kernel(X, DT, A, B, C, D, Y, STATES, L, H, N, P,
                    sx_b, sx_t, sx_h, sx_p, sdt_b, sdt_t, sdt_h, sb_b, sb_t, sb_n, sc_b, sc_t, sc_n,
                    sy_b, sy_t, sy_h, sy_p, HAS_D: tl.constexpr, Q: tl.constexpr, BN: tl.constexpr,
                    BP: tl.constexpr, PREC: tl.constexpr):
    bh, pb = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), bh % H
    mm = X.dtype.element_ty
    n = tl.arange(0, BN)
    p = pb * BP + tl.arange(0, BP)
    n_ok, p_ok = n < N, p < P
    X += b * sx_b + h * sx_h
    Y += b * sy_b + h * sy_h
    DT += b * sdt_b + h * sdt_h
    B += b * sb_b
    C += b * sc_b
    A_h = tl.load(A + h).to(tl.float32)
    D_h = tl.load(D + h).to(tl.float32) if HAS_D else 0.0
    n_chunks = tl.cdiv(L, Q)
    STATES += (bh.to(tl.int64) * n_chunks * N) * P
    i = tl.arange(0, Q)
    S = tl.zeros([BN, BP], dtype=tl.float32)
    for c in range(n_chunks):
        t = c * Q + i
        t_ok = t < L
        dt, g, g_all = _chunk_decays(DT, A_h, t, t_ok, sdt_t, Q)
        x = _tile(X, t, p, t_ok, p_ok, sx_t, sx_p)
        Ct = _tile(C, t, n, t_ok, n_ok, sc_t, sc_n)  # [Q, BN]
        Bn = _tile(B, n, t, n_ok, t_ok, sb_n, sb_t)  # [BN, Q]: B^T
        W = tl.where(i[None, :] <= i[:, None], tl.exp(g[:, None] - g[None, :]) * dt[None, :], 0.0)
        scores = tl.dot(Ct.to(mm), Bn.to(mm), input_precision=PREC) * W
        y = tl.dot(scores.to(mm), x.to(mm), input_precision=PREC)
        y += tl.dot((Ct * tl.exp(g)[:, None]).to(mm), S.to(mm), input_precision=PREC)
        if HAS_D:
            y += D_h * x
        tl.store(Y + t[:, None] * sy_t + p[None, :] * sy_p, y.to(Y.dtype.element_ty), mask=t_ok[:, None] & p_ok[None, :])
        tl.store(STATES + (c * N + n[:, None]) * P + p[None, :], S, mask=n_ok[:, None] & p_ok[None, :])
        w = tl.exp(g_all - g) * dt
        S = tl.exp(g_all) * S + tl.dot((Bn * w[None, :]).to(mm), x.to(mm), input_precision=PREC)


@triton.jit
def _ssd_bwd_kernel(X, DT, A, B, C, D, DY, STATES, DX, DDT, DB, DC, DA, DD, L, H, N, P, Bt,
                    sx_b, sx_t, sx_h, sx_p, sdt_b, sdt_t, sdt_h, sb_b, sb_t, sb_n, sc_b, sc_t, sc_n,
                    sdy_b, sdy_t, sdy_h, sdy_p, HAS_D: tl.constexpr, Q: tl.constexpr, BN: tl.constexpr,
                    BP: tl.constexpr, PREC: tl.constexpr):
    bh, pb = tl.program_id(0), tl.program_id(1)
    b, h = (bh // H).to(tl.int64), bh % H
    mm = X.dtype.element_ty
    n = tl.arange(0, BN)
    p = pb * BP + tl.arange(0, BP)
    n_ok, p_ok = n < N, p < P
    X += b * sx_b + h * sx_h
    DY += b * sdy_b + h * sdy_h
    DT += b * sdt_b + h * sdt_h
    B += b * sb_b
    C += b * sc_b
    DX += ((b * L) * H + h) * P  # dx is contiguous [Bt, L, H, P]
    DDT += ((pb * Bt + b) * L) * H + h  # [n blocks of P, Bt, L, H]
    DB += (((pb * H + h) * Bt + b) * L) * N  # [n blocks of P * H, Bt, L, N]
    DC += (((pb * H + h) * Bt + b) * L) * N
    A_h = tl.load(A + h).to(tl.float32)
    D_h = tl.load(D + h).to(tl.float32) if HAS_D else 0.0
    n_chunks = tl.cdiv(L, Q)
    STATES += (bh.to(tl.int64) * n_chunks * N) * P
    i = tl.arange(0, Q)
    below = i[None, :] <= i[:, None]  # [t, s]: s <= t
    dS = tl.zeros([BN, BP], dtype=tl.float32)
    dA = 0.0
    dD = 0.0
    for k in range(n_chunks):
        c = n_chunks - 1 - k
        t = c * Q + i
        t_ok = t < L
        dt, g, g_all = _chunk_decays(DT, A_h, t, t_ok, sdt_t, Q)
        eg = tl.exp(g)
        x = _tile(X, t, p, t_ok, p_ok, sx_t, sx_p)  # [Q, BP]
        xT = _tile(X, p, t, p_ok, t_ok, sx_p, sx_t)  # [BP, Q]
        dy = _tile(DY, t, p, t_ok, p_ok, sdy_t, sdy_p)
        Ct = _tile(C, t, n, t_ok, n_ok, sc_t, sc_n)  # [Q, BN]
        Cn = _tile(C, n, t, n_ok, t_ok, sc_n, sc_t)  # [BN, Q]
        Bt_ = _tile(B, t, n, t_ok, n_ok, sb_t, sb_n)
        Bn = _tile(B, n, t, n_ok, t_ok, sb_n, sb_t)
        S_in = _tile(STATES + c * N * P, n, p, n_ok, p_ok, P, 1)  # [BN, BP]
        S_inT = _tile(STATES + c * N * P, p, n, p_ok, n_ok, 1, P)  # [BP, BN]
        decay = tl.where(below, tl.exp(g[:, None] - g[None, :]), 0.0)  # [t, s]
        decayT = tl.where(i[:, None] <= i[None, :], tl.exp(g[None, :] - g[:, None]), 0.0)  # [s, t]
        W = decay * dt[None, :]
        WT = decayT * dt[:, None]
        w = tl.exp(g_all - g) * dt
        CB = tl.dot(Ct.to(mm), Bn.to(mm), input_precision=PREC)  # [t, s]
        BC = tl.dot(Bt_.to(mm), Cn.to(mm), input_precision=PREC)  # [s, t]
        BdS = tl.dot(Bt_.to(mm), dS.to(mm), input_precision=PREC)  # [Q, BP]
        dx = tl.dot((BC * WT).to(mm), dy.to(mm), input_precision=PREC) + w[:, None] * BdS
        if HAS_D:
            dx += D_h * dy
            dD += tl.sum(tl.sum(dy * x, axis=1), axis=0)
        tl.store(DX + t[:, None] * (H * P) + p[None, :], dx.to(DX.dtype.element_ty), mask=t_ok[:, None] & p_ok[None, :])
        dyx = tl.dot(dy.to(mm), xT.to(mm), input_precision=PREC)  # [t, s]: dy_t . x_s
        dC = tl.dot((dyx * W).to(mm), Bt_.to(mm), input_precision=PREC)
        dC += eg[:, None] * tl.dot(dy.to(mm), S_inT.to(mm), input_precision=PREC)
        tl.store(DC + t[:, None] * N + n[None, :], dC, mask=t_ok[:, None] & n_ok[None, :])
        dBT = tl.dot(Cn.to(mm), (dyx * W).to(mm), input_precision=PREC)  # [BN, s]
        dBT += tl.dot(dS.to(mm), xT.to(mm), input_precision=PREC) * w[None, :]
        tl.store(DB + t[None, :] * N + n[:, None], dBT, mask=n_ok[:, None] & t_ok[None, :])
        # the log decays' gradient: every term that holds an exp(G)
        F = dyx * CB * decay  # [t, s]: the score's gradient times its value, without dt_s
        E = F * dt[None, :]
        CS = tl.dot((Ct * eg[:, None]).to(mm), S_in.to(mm), input_precision=PREC)  # [Q, BP]
        R = tl.sum(BdS * x, axis=1)  # [Q]: B_s^T dS x_s
        dG = tl.sum(E, axis=1) - tl.sum(E, axis=0) + tl.sum(CS * dy, axis=1) - w * R
        S_out = tl.exp(g_all) * S_in + tl.dot((Bn * w[None, :]).to(mm), x.to(mm), input_precision=PREC)
        whole = tl.sum(tl.sum(dS * S_out, axis=1), axis=0)  # dL/dG_Q: G_Q is the sum of every a of the chunk
        da = tl.sum(tl.where(below, dG[:, None], 0.0), axis=0) + whole  # [s]: sum over t >= s of dG_t
        ddt = da * A_h + tl.sum(F, axis=0) + tl.exp(g_all - g) * R
        tl.store(DDT + t * H, ddt, mask=t_ok)
        dA += tl.sum(da * dt, axis=0)
        dS = tl.exp(g_all) * dS + tl.dot((Cn * eg[None, :]).to(mm), dy.to(mm), input_precision=PREC)
    tl.store(DA + pb * Bt * H + bh, dA)
    if HAS_D:
        tl.store(DD + pb * Bt * H + bh, dD)


def _launch(x: torch.Tensor, chunk: int, block_p: int):
    Bt, L, H, P = x.shape
    BP = max(16, min(block_p, triton.next_power_of_2(P)))
    return (Bt * H, triton.cdiv(P, BP)), BP


def _sizes(N: int, chunk: int) -> tuple[int, int]:
    return max(16, triton.next_power_of_2(N)), max(16, chunk)


def _precision(x: torch.Tensor) -> str:
    return "ieee" if x.dtype == torch.float32 else "tf32"  # (tf32 is ignored for bf16 / fp16 operands)


class SSDFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dt, A, B, C, D, chunk, block_p, num_warps, num_stages):
        Bt, L, H, P = x.shape
        N = B.shape[-1]
        grid, BP = _launch(x, chunk, block_p)
        BN, Q = _sizes(N, chunk)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        states = torch.empty(Bt * H, triton.cdiv(L, Q), N, P, dtype=torch.float32, device=x.device)
        _ssd_fwd_kernel[grid](
            x, dt, A, B, C, D, y, states, L, H, N, P, *x.stride(), *dt.stride(), *B.stride(), *C.stride(),
            *y.stride(), HAS_D=D is not None, Q=Q, BN=BN, BP=BP, PREC=_precision(x), num_warps=num_warps,
            num_stages=num_stages)
        ctx.save_for_backward(x, dt, A, B, C, D, states)
        ctx.config = chunk, block_p, num_warps, num_stages
        return y

    @staticmethod
    def backward(ctx, dy):
        x, dt, A, B, C, D, states = ctx.saved_tensors
        chunk, block_p, num_warps, num_stages = ctx.config
        Bt, L, H, P = x.shape
        N = B.shape[-1]
        grid, BP = _launch(x, chunk, block_p)
        BN, Q = _sizes(N, chunk)
        f32 = dict(dtype=torch.float32, device=x.device)
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        ddt = torch.empty(grid[1], Bt, L, H, **f32)
        dB, dC = (torch.empty(grid[1] * H, Bt, L, N, **f32) for _ in range(2))
        dA, dD = torch.empty(grid[1], Bt, H, **f32), torch.empty(grid[1], Bt, H, **f32)
        _ssd_bwd_kernel[grid](
            x, dt, A, B, C, D, dy, states, dx, ddt, dB, dC, dA, dD, L, H, N, P, Bt,
            *x.stride(), *dt.stride(), *B.stride(), *C.stride(), *dy.stride(),
            HAS_D=D is not None, Q=Q, BN=BN, BP=BP, PREC=_precision(x), num_warps=num_warps, num_stages=num_stages)
        return (dx, ddt.sum(0).to(dt.dtype), dA.sum((0, 1)).to(A.dtype), dB.sum(0).to(B.dtype),
                dC.sum(0).to(C.dtype), None if D is None else dD.sum((0, 1)).to(D.dtype), None, None, None, None)


def ssd_fused(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
              D: torch.Tensor | None = None, chunk: int = CHUNK, block_p: int = BLOCK_P,
              num_warps: int = NUM_WARPS, num_stages: int = NUM_STAGES) -> torch.Tensor:
    """``ssd_naive``'s result from the kernels above: x [Bt, L, H, P]; dt [Bt, L, H] > 0; A [H] < 0; B, C
    [Bt, L, N]; D [H] or None -> y [Bt, L, H, P] in x's dtype. ``chunk`` (a power of two, at least 16),
    ``block_p``, ``num_warps`` and ``num_stages`` change only the speed (tests make the chunk small)."""
    if chunk < 16 or chunk & (chunk - 1):
        raise ValueError(f"ssd_fused: chunk={chunk} is not a power of two >= 16")
    return SSDFunction.apply(x, dt, A, B, C, D, chunk, block_p, num_warps, num_stages)
