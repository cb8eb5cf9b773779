"""Triton kernels for gated sliding-window attention (GatedFWA Algorithm 2 and its backward).

Logits ``s_ij = q_i . k_j * scale + u_i - u_j`` for ``i - window < j <= i``; tensors are (B, T, H, D)
with any strides except a contiguous head dim. All exponentials are base 2.

The row term ``u_i`` cancels in the softmax, so the kernels work on ``q_i . k_j * scale - u_j``
(times log2(e)): the gate costs one vector load per key block and turns the scale multiply into a
fused multiply-add. For the same reason the gradient through ``u_i``,
``du^q_i = sum_j ds_ij = sum_j p_ij dp_ij - delta_i``, is exactly zero, and ``du = du^k``.

Each kernel splits its loop over the other axis into blocks that need the causal/window/length mask
(the two edges of the band) and blocks fully inside the band, which skip it.

* forward: one program per (query block, batch*head); online softmax over the key blocks that meet
  the window; writes o and the row log-sum-exp (log2 units, without ``u_i``).
* backward: ``delta_i = do_i . o_i``; one kernel per key block accumulates dk, dv and
  ``du_j = -sum_i ds_ij`` over the query blocks that see it; one kernel per query block accumulates dq.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zoo.kernels.backend import not_compiled
from zoo.kernels.layout import last_dim_contiguous, packed_base

LOG2E = tl.constexpr(1.4426950408889634)  # a constexpr, so the kernels can read it too
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _band_mask(offs_m, offs_n, T, window):
    return (offs_n[None, :] <= offs_m[:, None]) & (offs_n[None, :] > offs_m[:, None] - window) & \
        (offs_m[:, None] < T) & (offs_n[None, :] < T)


@triton.jit
def _key_blocks(start_m, T, window, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Key-block bounds of the query block at ``start_m``: blocks [lo, mid) hold the window's left edge,
    [mid, start_m) are fully visible, [start_m, end) hold the diagonal. Whole key blocks must tile a query
    block (else the unmasked blocks would run past ``start_m`` into the diagonal)."""
    tl.static_assert(BLOCK_M % BLOCK_N == 0, "query blocks must be a multiple of key blocks")
    lo = (tl.maximum(start_m - window + 1, 0) // BLOCK_N) * BLOCK_N
    mid = tl.minimum(tl.cdiv(tl.maximum(start_m + BLOCK_M - window, 0), BLOCK_N) * BLOCK_N, start_m)
    end = tl.minimum(start_m + BLOCK_M, T)
    return lo, mid, end


@triton.jit
def _key_logits(q, k_t, u_base, offs_n, s_ut, T, qk_scale, HAS_GATE: tl.constexpr, PREC: tl.constexpr):
    """[M, N] base-2 logits q.k * scale - u_j from q [M, D] and k_t [D, N]."""
    s = tl.dot(q, k_t, input_precision=PREC) * qk_scale
    if HAS_GATE:
        s -= tl.load(u_base + offs_n * s_ut, mask=offs_n < T, other=0.0)[None, :]
    return s


@triton.jit
def _fwd_keys(acc, m_i, l_i, q, offs_m, k_base, v_base, u_base, s_kt, s_vt, s_ut, lo, hi, T, window,
              qk_scale, offs_d, D, BLOCK_N: tl.constexpr, HAS_GATE: tl.constexpr, MASK: tl.constexpr,
              PREC: tl.constexpr):
    """Online-softmax update of one query block over key blocks lo..hi."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_t = tl.load(k_base + offs_n[None, :] * s_kt + offs_d[:, None],
                      mask=(offs_n[None, :] < T) & (offs_d[:, None] < D), other=0.0)
        s = _key_logits(q, k_t, u_base, offs_n, s_ut, T, qk_scale, HAS_GATE, PREC)
        if MASK:
            s = tl.where(_band_mask(offs_m, offs_n, T, window), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + offs_n[:, None] * s_vt + offs_d[None, :],
                    mask=(offs_n[:, None] < T) & (offs_d[None, :] < D), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attn_fwd(q_ptr, k_ptr, v_ptr, u_ptr, o_ptr, lse_ptr, T, H, window, qk_scale,
              s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_ub, s_ut, s_uh, s_ob, s_ot, s_oh,
              D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
              HAS_GATE: tl.constexpr, PREC: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m[:, None] < T) & (offs_d[None, :] < D)
    q = tl.load(q_ptr + b * s_qb + h * s_qh + offs_m[:, None] * s_qt + offs_d[None, :], mask=q_mask, other=0.0)
    u_base = u_ptr + b * s_ub + h * s_uh
    k_base = k_ptr + b * s_kb + h * s_kh
    v_base = v_ptr + b * s_vb + h * s_vh
    lo, mid, end = _key_blocks(start_m, T, window, BLOCK_M, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc, m_i, l_i = _fwd_keys(acc, m_i, l_i, q, offs_m, k_base, v_base, u_base, s_kt, s_vt, s_ut, lo, mid,
                              T, window, qk_scale, offs_d, D, BLOCK_N, HAS_GATE, True, PREC)
    acc, m_i, l_i = _fwd_keys(acc, m_i, l_i, q, offs_m, k_base, v_base, u_base, s_kt, s_vt, s_ut, mid, start_m,
                              T, window, qk_scale, offs_d, D, BLOCK_N, HAS_GATE, False, PREC)
    acc, m_i, l_i = _fwd_keys(acc, m_i, l_i, q, offs_m, k_base, v_base, u_base, s_kt, s_vt, s_ut, start_m, end,
                              T, window, qk_scale, offs_d, D, BLOCK_N, HAS_GATE, True, PREC)
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    o = acc / l_safe[:, None]
    tl.store(o_ptr + b * s_ob + h * s_oh + offs_m[:, None] * s_ot + offs_d[None, :], o.to(o_ptr.dtype.element_ty),
             mask=q_mask)
    tl.store(lse_ptr + bh * T + offs_m, m_safe + tl.log2(l_safe), mask=offs_m < T)


@triton.jit
def _attn_bwd_delta(o_ptr, do_ptr, delta_ptr, T, H, s_ob, s_ot, s_oh, s_db, s_dt, s_dh, D: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """delta[b, h, i] = do_i . o_i in fp32."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m[:, None] < T) & (offs_d[None, :] < D)
    o = tl.load(o_ptr + b * s_ob + h * s_oh + offs_m[:, None] * s_ot + offs_d[None, :], mask=mask, other=0.0)
    do = tl.load(do_ptr + b * s_db + h * s_dh + offs_m[:, None] * s_dt + offs_d[None, :], mask=mask, other=0.0)
    tl.store(delta_ptr + bh * T + offs_m, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1), mask=offs_m < T)


@triton.jit
def _dkdv_queries(dk, dv, du, k, v, u_j, offs_n, q_base, do_base, lse_base, delta_base, s_qt, s_dt,
                  lo, hi, T, window, qk_scale, offs_d, D, BLOCK_M: tl.constexpr, HAS_GATE: tl.constexpr,
                  MASK: tl.constexpr, PREC: tl.constexpr):
    """Accumulate one key block's dk, dv, du over query blocks lo..hi, in transposed [N, M] tiles."""
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row_mask = offs_m < T
        qd_mask = row_mask[:, None] & (offs_d[None, :] < D)
        q = tl.load(q_base + offs_m[:, None] * s_qt + offs_d[None, :], mask=qd_mask, other=0.0)
        do = tl.load(do_base + offs_m[:, None] * s_dt + offs_d[None, :], mask=qd_mask, other=0.0)
        lse = tl.load(lse_base + offs_m, mask=row_mask, other=0.0)
        delta = tl.load(delta_base + offs_m, mask=row_mask, other=0.0)
        s_t = tl.dot(k, tl.trans(q), input_precision=PREC) * qk_scale
        if HAS_GATE:
            s_t -= u_j[:, None]
        if MASK:
            s_t = tl.where(tl.trans(_band_mask(offs_m, offs_n, T, window)), s_t, float("-inf"))
        p_t = tl.exp2(s_t - lse[None, :])
        dv += tl.dot(p_t.to(do.dtype), do, input_precision=PREC)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PREC)
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PREC)
        if HAS_GATE:
            du -= tl.sum(ds_t, 1)
    return dk, dv, du


@triton.jit
def _attn_bwd_dkdv(q_ptr, k_ptr, v_ptr, u_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, du_ptr, T, H, window,
                   qk_scale, s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_ub, s_ut, s_uh,
                   s_db, s_dt, s_dh, s_gb, s_gt, s_gh, s_wb, s_wt, s_wh,
                   D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                   HAS_GATE: tl.constexpr, PREC: tl.constexpr):
    """One key block: dk, dv (strides s_g*) and du (B, T, H, strides s_w*) over the queries that see it."""
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n[:, None] < T) & (offs_d[None, :] < D)
    k = tl.load(k_ptr + b * s_kb + h * s_kh + offs_n[:, None] * s_kt + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b * s_vb + h * s_vh + offs_n[:, None] * s_vt + offs_d[None, :], mask=kv_mask, other=0.0)
    u_j = tl.load(u_ptr + b * s_ub + h * s_uh + offs_n * s_ut, mask=offs_n < T, other=0.0)
    q_base = q_ptr + b * s_qb + h * s_qh
    do_base = do_ptr + b * s_db + h * s_dh
    # query blocks [start_n, mid) hold the diagonal, [mid, hi) are fully inside the band, [hi, end) its far edge;
    # mid must start a query block, so whole query blocks tile a key block
    tl.static_assert(BLOCK_N % BLOCK_M == 0, "key blocks must be a multiple of query blocks")
    mid = tl.minimum(start_n + BLOCK_N, T)
    hi = tl.minimum(start_n + BLOCK_N + tl.maximum(window - BLOCK_N, 0) // BLOCK_M * BLOCK_M, T // BLOCK_M * BLOCK_M)
    hi = tl.maximum(hi, mid)
    end = tl.minimum(start_n + BLOCK_N + window - 1, T)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    du = tl.zeros([BLOCK_N], dtype=tl.float32)
    lse_base, delta_base = lse_ptr + bh * T, delta_ptr + bh * T
    dk, dv, du = _dkdv_queries(dk, dv, du, k, v, u_j, offs_n, q_base, do_base, lse_base, delta_base, s_qt, s_dt,
                               start_n, mid, T, window, qk_scale, offs_d, D, BLOCK_M, HAS_GATE, True, PREC)
    dk, dv, du = _dkdv_queries(dk, dv, du, k, v, u_j, offs_n, q_base, do_base, lse_base, delta_base, s_qt, s_dt,
                               mid, hi, T, window, qk_scale, offs_d, D, BLOCK_M, HAS_GATE, False, PREC)
    dk, dv, du = _dkdv_queries(dk, dv, du, k, v, u_j, offs_n, q_base, do_base, lse_base, delta_base, s_qt, s_dt,
                               hi, end, T, window, qk_scale, offs_d, D, BLOCK_M, HAS_GATE, True, PREC)
    out = b * s_gb + h * s_gh + offs_n[:, None] * s_gt + offs_d[None, :]
    tl.store(dk_ptr + out, (dk * (qk_scale / LOG2E)).to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dv_ptr + out, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)
    if HAS_GATE:
        tl.store(du_ptr + b * s_wb + h * s_wh + offs_n * s_wt, du, mask=offs_n < T)


@triton.jit
def _dq_keys(dq, q, do, lse, delta, offs_m, k_base, v_base, u_base, s_kt, s_vt, s_ut, lo, hi, T, window,
             qk_scale, offs_d, D, BLOCK_N: tl.constexpr, HAS_GATE: tl.constexpr, MASK: tl.constexpr,
             PREC: tl.constexpr):
    """Accumulate one query block's dq over key blocks lo..hi."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_base + offs_n[:, None] * s_kt + offs_d[None, :],
                    mask=(offs_n[:, None] < T) & (offs_d[None, :] < D), other=0.0)
        v_t = tl.load(v_base + offs_n[None, :] * s_vt + offs_d[:, None],
                      mask=(offs_n[None, :] < T) & (offs_d[:, None] < D), other=0.0)
        s = _key_logits(q, tl.trans(k), u_base, offs_n, s_ut, T, qk_scale, HAS_GATE, PREC)
        if MASK:
            s = tl.where(_band_mask(offs_m, offs_n, T, window), s, float("-inf"))
        p = tl.exp2(s - lse[:, None])
        ds = p * (tl.dot(do, v_t, input_precision=PREC) - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
    return dq


@triton.jit
def _attn_bwd_dq(q_ptr, k_ptr, v_ptr, u_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, T, H, window,
                 qk_scale, s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_ub, s_ut, s_uh,
                 s_db, s_dt, s_dh, s_gb, s_gt, s_gh,
                 D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                 HAS_GATE: tl.constexpr, PREC: tl.constexpr):
    """One query block: dq (strides s_g*)."""
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_mask = offs_m < T
    q_mask = row_mask[:, None] & (offs_d[None, :] < D)
    q = tl.load(q_ptr + b * s_qb + h * s_qh + offs_m[:, None] * s_qt + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(do_ptr + b * s_db + h * s_dh + offs_m[:, None] * s_dt + offs_d[None, :], mask=q_mask, other=0.0)
    lse = tl.load(lse_ptr + bh * T + offs_m, mask=row_mask, other=0.0)
    delta = tl.load(delta_ptr + bh * T + offs_m, mask=row_mask, other=0.0)
    u_base = u_ptr + b * s_ub + h * s_uh
    k_base = k_ptr + b * s_kb + h * s_kh
    v_base = v_ptr + b * s_vb + h * s_vh
    lo, mid, end = _key_blocks(start_m, T, window, BLOCK_M, BLOCK_N)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    dq = _dq_keys(dq, q, do, lse, delta, offs_m, k_base, v_base, u_base, s_kt, s_vt, s_ut, lo, mid,
                  T, window, qk_scale, offs_d, D, BLOCK_N, HAS_GATE, True, PREC)
    dq = _dq_keys(dq, q, do, lse, delta, offs_m, k_base, v_base, u_base, s_kt, s_vt, s_ut, mid,
                  start_m, T, window, qk_scale, offs_d, D, BLOCK_N, HAS_GATE, False, PREC)
    dq = _dq_keys(dq, q, do, lse, delta, offs_m, k_base, v_base, u_base, s_kt, s_vt, s_ut, start_m,
                  end, T, window, qk_scale, offs_d, D, BLOCK_N, HAS_GATE, True, PREC)
    tl.store(dq_ptr + b * s_gb + h * s_gh + offs_m[:, None] * s_gt + offs_d[None, :],
             (dq * (qk_scale / LOG2E)).to(dq_ptr.dtype.element_ty), mask=q_mask)


@dataclass(frozen=True)
class Blocks:
    """One kernel's launch: tiles of ``m`` query rows by ``n`` key rows, ``warps`` warps, ``stages``
    software-pipelining stages. The forward's and dQ's ``m`` must be a multiple of their ``n``, dK/dV's ``n`` a
    multiple of its ``m`` (the kernels assert it when they compile: their unmasked blocks assume it)."""
    m: int
    n: int
    warps: int = 4
    stages: int = 2


KERNELS = ("fwd", "dkdv", "dq")


def default_blocks(kind: str, D: int, device: torch.device) -> Blocks:
    """The table: blocks per kernel (``KERNELS``), head dim and GPU generation."""
    if INTERPRET:
        return {"fwd": Blocks(32, 16), "dkdv": Blocks(16, 32), "dq": Blocks(32, 16)}[kind]
    major = torch.cuda.get_device_capability(device)[0]
    stages = 3 if major >= 9 else 2
    if D > 128:  # 256-wide tiles: swept on an H200 at the grid's d=512 cells (NOTES.md)
        table = {"fwd": Blocks(64, 32, 4, 2), "dkdv": Blocks(32, 32, 4, 2), "dq": Blocks(64, 16, 4, 2)}
    else:  # measured on an H200 (NOTES.md): 64-row query blocks beat 128 for windowed work
        table = {"fwd": Blocks(64, 32, 4, stages), "dkdv": Blocks(64, 64, 4, stages - 1),
                 "dq": Blocks(64, 32, 4, stages - 1)}
        if D > 64:  # head dim 128: dK/dV on 32 query rows, dQ on 64 key rows; 13 to 19% less backward (NOTES.md)
            table["dkdv"], table["dq"] = Blocks(32, 64, 4, stages - 1), Blocks(64, 64, 4, stages - 1)
    return table[kind]


def _strides(x):
    return [x.stride(i) for i in range(x.dim() - 1)]


def attention_fwd(q, k, v, u, window: int, scale: float, blocks: Blocks | None = None):
    """o (B, T, H, D) like q and lse (B, H, T) fp32; u is (B, T, H) fp32 in log2 units (u * log2(e)), or None.
    ``blocks``: the kernel's launch, the table's (:func:`default_blocks`) when None."""
    B, T, H, D = q.shape
    o = torch.empty(B, T, H, D, device=q.device, dtype=q.dtype)
    lse = torch.empty(B, H, T, device=q.device, dtype=torch.float32)
    blocks = blocks or default_blocks("fwd", D, q.device)
    gate = q if u is None else u
    _attn_fwd[(triton.cdiv(T, blocks.m), B * H)](
        q, k, v, gate, o, lse, T, H, window, scale * LOG2E.value,
        *_strides(q), *_strides(k), *_strides(v), *(_strides(u) + [u.stride(2)] if u is not None else [0, 0, 0]),
        *_strides(o), D=D, BLOCK_M=blocks.m, BLOCK_N=blocks.n, BLOCK_D=max(16, triton.next_power_of_2(D)),
        HAS_GATE=u is not None, PREC=_precision(q), num_warps=blocks.warps, num_stages=blocks.stages)
    return o, lse


def attention_bwd(q, k, v, u, o, lse, do, window: int, scale: float, dkdv_blocks: Blocks | None = None,
                  dq_blocks: Blocks | None = None):
    """(dq, dk, dv, du): gradients like q, k, v and du (B, T, H) fp32 (None without a gate); where q, k, v are views
    of one (B, T, 3, H, D) tensor (``layout.packed_base``), dq, dk, dv are views of one too. ``dkdv_blocks``,
    ``dq_blocks``: the two kernels' launches, the table's (:func:`default_blocks`) when None."""
    B, T, H, D = q.shape
    block_d = max(16, triton.next_power_of_2(D))
    delta = torch.empty(B, H, T, device=q.device, dtype=torch.float32)
    _attn_bwd_delta[(triton.cdiv(T, 64), B * H)](o, do, delta, T, H, *_strides(o), *_strides(do), D=D, BLOCK_M=64,
                                                 BLOCK_D=block_d)
    dkdv_blocks = dkdv_blocks or default_blocks("dkdv", D, q.device)
    dq_blocks = dq_blocks or default_blocks("dq", D, q.device)
    base = packed_base((q, k, v))
    if base is not None:  # q, k, v are one projection's views: their gradients too, so its backward copies nothing
        dq, dk, dv = torch.empty_like(base, memory_format=torch.contiguous_format).unbind(2)
    else:
        dq, dk, dv = (torch.empty(B, T, H, D, device=q.device, dtype=x.dtype) for x in (q, k, v))
    gate = q if u is None else u
    u_strides = _strides(u) + [u.stride(2)] if u is not None else [0, 0, 0]
    du = torch.empty(B, T, H, device=q.device, dtype=torch.float32) if u is not None else None
    common = dict(BLOCK_D=block_d, D=D, HAS_GATE=u is not None, PREC=_precision(q))
    _attn_bwd_dkdv[(triton.cdiv(T, dkdv_blocks.n), B * H)](
        q, k, v, gate, do, lse, delta, dk, dv, du if du is not None else delta, T, H, window, scale * LOG2E.value,
        *_strides(q), *_strides(k), *_strides(v), *u_strides, *_strides(do), *_strides(dk),
        *(_strides(du) + [du.stride(2)] if du is not None else [0, 0, 0]),
        BLOCK_M=dkdv_blocks.m, BLOCK_N=dkdv_blocks.n, **common, num_warps=dkdv_blocks.warps,
        num_stages=dkdv_blocks.stages)
    _attn_bwd_dq[(triton.cdiv(T, dq_blocks.m), B * H)](
        q, k, v, gate, do, lse, delta, dq, T, H, window, scale * LOG2E.value,
        *_strides(q), *_strides(k), *_strides(v), *u_strides, *_strides(do), *_strides(dq),
        BLOCK_M=dq_blocks.m, BLOCK_N=dq_blocks.n, **common, num_warps=dq_blocks.warps, num_stages=dq_blocks.stages)
    return dq, dk, dv, du


def _precision(q: torch.Tensor) -> str:
    """fp32 inputs get exact fp32 products (tf32 would miss the fp32 tolerances)."""
    return "ieee" if q.dtype == torch.float32 else "tf32"


def log2_gate(u: torch.Tensor) -> torch.Tensor:
    """The kernels' gate of u (B, T, H): float32 in log2 units (u * log2(e)), laid out (B, H, T) behind a
    (B, T, H) view, so that each key block loads one contiguous vector."""
    return (u.float() * LOG2E.value).transpose(1, 2).contiguous().transpose(1, 2)


class GatedWindowAttention(torch.autograd.Function):
    """Autograd wrapper of the forward and backward kernels; gradients flow to q, k, v and u."""

    @staticmethod
    def forward(ctx, q, k, v, u, window, scale):
        q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
        if u is not None:
            u = log2_gate(u)
        o, lse = attention_fwd(q, k, v, u, window, scale)
        ctx.save_for_backward(q, k, v, u, o, lse)
        ctx.window, ctx.scale = window, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, u, o, lse = ctx.saved_tensors
        dq, dk, dv, du = attention_bwd(q, k, v, u, o, lse, last_dim_contiguous(do), ctx.window, ctx.scale)
        return dq, dk, dv, du, None, None


# Opaque to torch.compile: Inductor failed on the GatedFWA model (H100, torch 2.11, Triton 3.6: InductorError
# in its compile subprocess), and it has nothing to fuse into a hand-written kernel.
@not_compiled
def gated_window_attention_triton(q, k, v, u, window: int, scale: float | None = None):
    """Triton version of :func:`zoo.kernels.gatedfwa.naive.gated_window_attention_ref`."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return GatedWindowAttention.apply(q, k, v, u, window, scale)
