"""Softmax attention from a few query rows of each sequence: the last block of an attention model that needs its
outputs at the labelled rows alone (MQAR's K = L / 16 at N = 256), in one Triton program per sequence and head.

Why: SDPA takes such a call as a masked attention (a bool (B, 1, K, L) mask) and runs a kernel made for square
ones: on an H100 at B=256, L=256, one head of 128, its 16 queries against 256 keys with dropout took 55 / 221 us
forward / forward + backward (cuDNN, SDPA's choice), more than the full causal attention of the first block (42 /
207 us; ``results/SPEED.md``), for a sixteenth of its arithmetic. Here one program holds a sequence's K queries
(padded to 16 rows at least, for ``tl.dot``) and walks its keys in blocks once: an online softmax forward, and a
backward that writes each key block's dk, dv (and key-bias gradient) as it goes, since no other program's queries
see those keys, and sums dq over the blocks. Nothing is stored for the backward but o and the rows' log-sum-exp;
dropout's mask is drawn from a seed (``tl.rand``: Philox of the seed and the score's flat index) and drawn again
backward, never stored.

Shapes: q [B, K, H, D] (the queries at ``positions`` [B, K], int, each in [0, L)); k, v [B, L, H, D] (any strides
with a contiguous head dim: attention's views of one projection); ``window`` None (causal: query at p sees keys
j <= p) or w (p - w < j <= p); ``key_bias`` None or [B, L, H] float, added to the scaled logits of key j
(GatedFWA's decay -u_j, differentiable) -> o [B, K, H, D] in q's dtype. Dropout on the probabilities as SDPA's
(kept ones scaled by 1 / (1 - p)), with other random numbers.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.attention import tile_side
from zoo.kernels.backend import not_compiled
from zoo.kernels.layout import last_dim_contiguous


@triton.jit
def _kept(SEED, bh, rows, keys, M, N, p):
    """Whether dropout keeps each score of the [BLOCK_M, BLOCK_N] tile of program ``bh``: a uniform draw of the
    score's flat index in [B, H, M, N] (as an int32) with the saved seed, at least p."""
    flat = (bh * M + rows[:, None]) * N + keys[None, :]
    return tl.rand(tl.load(SEED), flat.to(tl.int32)) >= p


@triton.jit
def _logits(q, K, KB, bias_base, keys, key_ok, cols, D, pos, s_kn, s_bn, scale, window,
            WINDOWED: tl.constexpr, BIASED: tl.constexpr, PREC: tl.constexpr):
    """One key block: its keys [BLOCK_N, BLOCK_D] and the scaled, biased and masked logits [BLOCK_M, BLOCK_N] of the
    queries at ``pos`` (-1 for padding rows, which see nothing)."""
    k = tl.load(K + keys[:, None] * s_kn + cols[None, :], mask=key_ok[:, None] & (cols < D)[None, :], other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale
    if BIASED:
        s += tl.load(KB + bias_base + keys * s_bn, mask=key_ok, other=0.0).to(tl.float32)[None, :]
    seen = keys[None, :] <= pos[:, None]
    if WINDOWED:
        seen = seen & (keys[None, :] > pos[:, None] - window)
    return k, tl.where(seen, s, float("-inf"))


@triton.jit
def _program(Q, POS, s_qb, s_qm, s_qh, s_pb, s_pm, M, H, D, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    """(b, h, bh as int64; query rows, head-dim columns; row mask; positions; the rows' offset in q's layout)."""
    bh = tl.program_id(0).to(tl.int64)
    b, h = bh // H, bh % H
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < M
    pos = tl.load(POS + b * s_pb + rows * s_pm, mask=row_ok, other=-1)
    q_at = b * s_qb + h * s_qh + rows[:, None] * s_qm + cols[None, :]
    return b, h, bh, rows, cols, row_ok, pos, q_at


@triton.jit
def _attention_rows_fwd(Q, K, V, POS, KB, SEED, O, LSE, M, N, H, D, scale, window, p, keep_scale,
                        s_qb, s_qm, s_qh, s_kb, s_kn, s_kh, s_vb, s_vn, s_vh, s_pb, s_pm, s_bb, s_bn, s_bh,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, WINDOWED: tl.constexpr,
                        BIASED: tl.constexpr, DROPOUT: tl.constexpr, PREC: tl.constexpr):
    b, h, bh, rows, cols, row_ok, pos, q_at = _program(Q, POS, s_qb, s_qm, s_qh, s_pb, s_pm, M, H, D, BLOCK_M,
                                                       BLOCK_D)
    qd_ok = row_ok[:, None] & (cols < D)[None, :]
    q = tl.load(Q + q_at, mask=qd_ok, other=0.0)
    K += b * s_kb + h * s_kh
    V += b * s_vb + h * s_vh
    bias_base = b * s_bb + h * s_bh
    hi = tl.max(pos) + 1  # the keys some query sees: [lo, hi)
    lo = 0
    if WINDOWED:
        lo = tl.maximum(tl.min(tl.where(row_ok, pos, N)) - window + 1, 0) // BLOCK_N * BLOCK_N
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        key_ok = keys < N
        _, s = _logits(q, K, KB, bias_base, keys, key_ok, cols, D, pos, s_kn, s_bn, scale, window, WINDOWED,
                       BIASED, PREC)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        alpha = tl.exp(m_i - m_safe)
        pr = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(pr, 1)
        if DROPOUT:
            pr = tl.where(_kept(SEED, bh, rows, keys, M, N, p), pr * keep_scale, 0.0)
        v = tl.load(V + keys[:, None] * s_vn + cols[None, :], mask=key_ok[:, None] & (cols < D)[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(pr.to(v.dtype), v, input_precision=PREC)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o_at = ((b * M + rows[:, None]) * H + h) * D + cols[None, :]  # o is a contiguous [B, M, H, D]
    tl.store(O + o_at, (acc / l_safe[:, None]).to(O.dtype.element_ty), mask=qd_ok)
    tl.store(LSE + bh * M + rows, tl.where(m_i == float("-inf"), 0.0, m_i) + tl.log(l_safe), mask=row_ok)


@triton.jit
def _attention_rows_bwd(Q, K, V, POS, KB, SEED, O, DO, LSE, DQ, DK, DV, DB, M, N, H, D, scale, window, p,
                        keep_scale, s_qb, s_qm, s_qh, s_kb, s_kn, s_kh, s_vb, s_vn, s_vh, s_pb, s_pm, s_bb, s_bn, s_bh,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, WINDOWED: tl.constexpr,
                        BIASED: tl.constexpr, DROPOUT: tl.constexpr, PREC: tl.constexpr):
    """Every key block of the sequence, seen or not (its dk, dv are written either way: zeros where no query sees
    it); o, do, dq are contiguous [B, M, H, D], dk, dv [B, N, H, D], the key bias's gradient [B, N, H] float32."""
    b, h, bh, rows, cols, row_ok, pos, q_at = _program(Q, POS, s_qb, s_qm, s_qh, s_pb, s_pm, M, H, D, BLOCK_M,
                                                       BLOCK_D)
    qd_ok = row_ok[:, None] & (cols < D)[None, :]
    q = tl.load(Q + q_at, mask=qd_ok, other=0.0)
    o_at = ((b * M + rows[:, None]) * H + h) * D + cols[None, :]
    do = tl.load(DO + o_at, mask=qd_ok, other=0.0)
    delta = tl.sum(do.to(tl.float32) * tl.load(O + o_at, mask=qd_ok, other=0.0).to(tl.float32), 1)
    lse = tl.load(LSE + bh * M + rows, mask=row_ok, other=0.0)
    K += b * s_kb + h * s_kh
    V += b * s_vb + h * s_vh
    bias_base = b * s_bb + h * s_bh
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        key_ok = keys < N
        kd_ok = key_ok[:, None] & (cols < D)[None, :]
        k, s = _logits(q, K, KB, bias_base, keys, key_ok, cols, D, pos, s_kn, s_bn, scale, window, WINDOWED,
                       BIASED, PREC)
        pr = tl.exp(s - lse[:, None])  # the probabilities before dropout (zero where unseen)
        v = tl.load(V + keys[:, None] * s_vn + cols[None, :], mask=kd_ok, other=0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)  # the gradient of the probabilities after dropout
        dropped = pr
        if DROPOUT:
            kept = _kept(SEED, bh, rows, keys, M, N, p)
            dropped = tl.where(kept, pr * keep_scale, 0.0)
            dp = tl.where(kept, dp * keep_scale, 0.0)
        dv = tl.dot(tl.trans(dropped.to(do.dtype)), do, input_precision=PREC)
        ds = pr * (dp - delta[:, None])  # the logits' gradient
        dk = tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PREC) * scale
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PREC)
        kv_at = ((b * N + keys[:, None]) * H + h) * D + cols[None, :]
        tl.store(DK + kv_at, dk.to(DK.dtype.element_ty), mask=kd_ok)
        tl.store(DV + kv_at, dv.to(DV.dtype.element_ty), mask=kd_ok)
        if BIASED:
            tl.store(DB + (b * N + keys) * H + h, tl.sum(ds, 0), mask=key_ok)
    tl.store(DQ + o_at, (dq * scale).to(DQ.dtype.element_ty), mask=qd_ok)


def _precision(q: torch.Tensor) -> str:
    """float32 inputs get exact float32 products (tf32 would miss float32 tolerances)."""
    return "ieee" if q.dtype == torch.float32 else "tf32"


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, key_bias, window,
            dropout_p: float) -> tuple[list, dict]:
    """The arguments both kernels share after their pointers: sizes, scalars, strides; and the constexprs."""
    B, M, H, D = q.shape
    block_d = tile_side(D)
    bias_strides = list(key_bias.stride()) if key_bias is not None else [0, 0, 0]
    args = [M, k.shape[1], H, D, D ** -0.5, window or 0, dropout_p, 1.0 / (1.0 - dropout_p),
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *positions.stride(), *bias_strides]
    constexprs = dict(BLOCK_M=tile_side(M), BLOCK_N=64 if block_d <= 128 else 32, BLOCK_D=block_d,
                      WINDOWED=window is not None, BIASED=key_bias is not None, DROPOUT=dropout_p > 0,
                      PREC=_precision(q), num_warps=4 if block_d <= 128 else 8)
    return args, constexprs


class _AttentionAtRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, positions, key_bias, window, dropout_p):
        q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
        B, M, H, D = q.shape
        seed = (torch.randint(2 ** 31 - 1, (1,), device=q.device, dtype=torch.int64) if dropout_p > 0
                else positions)  # a pointer never read
        o = torch.empty(B, M, H, D, device=q.device, dtype=q.dtype)
        lse = torch.empty(B, H, M, device=q.device, dtype=torch.float32)
        args, constexprs = _launch(q, k, v, positions, key_bias, window, dropout_p)
        bias = key_bias if key_bias is not None else q  # a pointer never read
        _attention_rows_fwd[(B * H,)](q, k, v, positions, bias, seed, o, lse, *args, **constexprs)
        ctx.save_for_backward(q, k, v, positions, key_bias, seed, o, lse)
        ctx.window, ctx.dropout_p = window, dropout_p
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, positions, key_bias, seed, o, lse = ctx.saved_tensors
        B, M, H, D = q.shape
        N = k.shape[1]
        dq = torch.empty_like(o)
        dk = torch.empty(B, N, H, D, device=k.device, dtype=k.dtype)
        dv = torch.empty(B, N, H, D, device=v.device, dtype=v.dtype)
        dbias = torch.empty(B, N, H, device=q.device, dtype=torch.float32) if key_bias is not None else None
        args, constexprs = _launch(q, k, v, positions, key_bias, ctx.window, ctx.dropout_p)
        bias = key_bias if key_bias is not None else q
        _attention_rows_bwd[(B * H,)](q, k, v, positions, bias, seed, o, do.to(o.dtype).contiguous(), lse, dq, dk,
                                      dv, dbias if dbias is not None else lse, *args, **constexprs)
        dbias = dbias.to(key_bias.dtype) if dbias is not None else None
        return dq, dk, dv, None, dbias, None, None


# Opaque to torch.compile: Inductor has nothing to fuse into a hand-written kernel.
@not_compiled
def attention_at_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                      window: int | None = None, key_bias: torch.Tensor | None = None,
                      dropout_p: float = 0.0) -> torch.Tensor:
    """The Triton form of ``zoo.kernels.attention.attention_at_rows`` (shapes: module doc; q, k, v of one dtype, the
    query tile within ``zoo.kernels.attention.rows_fit``)."""
    return _AttentionAtRows.apply(q, k, v, positions, key_bias, window, float(dropout_p))
