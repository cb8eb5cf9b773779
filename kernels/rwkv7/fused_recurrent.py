"""Triton fused recurrence for RWKV-7's state evolution (``naive.py``), forward and backward.

Per batch and head, with state S: (K, V) in float32, S_0 = 0 and w_t the log decays::

    sa_t = S_{t-1}^T a_t,   S_t = diag(exp(w_t)) S_{t-1} + b_t sa_t^T + k_t v_t^T,   o_t = S_t^T r_t

One program per (batch, head, block of BV value columns) keeps its (K, BV) slice of S on chip and walks time
inside the kernel: the columns of S evolve independently (every sum of the forward is over K), so the programs of
one head share nothing but their inputs. The backward walks time in reverse carrying dS = dL/dS_t (K, BV)::

    dS_t += r_t do_t^T,  dr_t = S_t do_t,  dv_t = dS_t^T k_t,  dk_t = dS_t v_t,  db_t = dS_t sa_t,
    dsa_t = dS_t^T b_t,  dw_t = exp(w_t) * rowsum(dS_t * S_{t-1}),  da_t = S_{t-1} dsa_t,
    dS_{t-1} = diag(exp(w_t)) dS_t + a_t dsa_t^T

and step t needs S_t and S_{t-1} (sa_t is recomputed from S_{t-1}). Every exponent is one step's w_t <= 0, never a
sum of them, so nothing overflows whatever the decays (w = -20 is tested). The wrapper picks one of three modes per
call (``Launch.states``, ``zoo.kernels.stored_states``; "auto": half where its states fit ``STATE_BUDGET_BYTES``,
else chunked), as the selective scan (``zoo.kernels.selective_scan.fused_recurrent``) does:

* all: the forward writes every state, S_0 = 0 to S_L, a (B H, L + 1, K, V) float32 tensor, and the backward reads
  S_t and S_{t-1} in one reverse walk, with no recompute.
* half (the default): the forward writes every other state (S_0, S_2, ..., and S_L), half the memory and half the
  writes, and the reverse walk makes each S_{t-1} not stored from S_{t-2} with one step of the forward, from step
  t - 1's rows, which it loads two steps ahead (only in this mode: held that far in the others, they cost the walk
  registers and time).
* chunked: the forward stores only the state entering each chunk of ``CHUNK`` steps (1/CHUNK of the memory), and
  the backward, chunk by chunk from the last, walks the chunk forward again from that state (keeping each step's
  incoming state in a per-program scratch of CHUNK states, meant to stay in L2), then walks it back in reverse.

Writing the states is most of the forward's time (``Launch.states_dtype=torch.bfloat16`` halves their bytes:
``zoo.kernels.stored_states``; the timings below are of float32 states, the default). Forward / forward + backward in ms, one process on an H100 80GB
(torch 2.11, Triton 3.6, bf16 inputs, K = V = 64, default launch, best of two interleaved rounds of ``do_bench``),
all (the default before half) against half and chunked::

    B=256, L=256, H=2:  all 1.123 / 3.319   half 0.636 / 3.015   chunked 0.440 / 3.254
    B=128, L=512, H=2:  all 0.903 / 3.109   half 0.591 / 3.020   chunked 0.426 / 3.225
    B=512, L=128, H=4:  all 1.974 / 6.226   half 1.103 / 5.770   chunked 0.704 / 6.188

(At the last shape every state exceeds the budget, so the default before half ran chunked there.) Half with step
t - 1's rows loaded one step ahead, like the other modes, and its recompute placed after the step's first sums was
no faster than all (3.331, 3.189, 6.098 ms forward + backward); loading two steps ahead in every mode made all
slower (3.534 ms at the first shape).

The forward walks two steps a loop step where it keeps states in one span (all and half), as the scan's does: with
every other state kept, the state to store is the loop step's last (no branch each step), and the two steps' work
off the chain (their outputs' sums over K) can overlap. Forward / forward + backward, ms, half, default launch, best
of two interleaved rounds in one process on an H100 80GB, one step a loop step -> two: 0.644 / 2.893 -> 0.571 /
2.823 at B=256, L=256, H=2; 0.591 / 2.909 -> 0.559 / 2.878 at B=128, L=512, H=2; 1.104 / 5.537 -> 1.119 / 5.554 at
B=512, L=128, H=4. A launch of its own for the forward (16 to 64 columns, 1 to 4 warps) was fastest at no more than
two of the three shapes (32 columns and one warp: 0.506, 0.647, 1.004 ms), so it keeps the backward's.

Launch: 16 value columns and one warp per program (``Launch``'s defaults): a program's sums stay inside one warp,
with no shared-memory round trip per step, many small programs fill the SMs (B H V / 16 of them), and the
backward's three live (K, 16) tiles (S_t, S_{t-1}, dS) stay in registers at K = 64. Measured on an H200 (torch 2.11,
Triton 3.6, bf16 inputs, K = V = 64, H = 2, every state stored), forward + backward in ms, this launch against the
best of the other eight (16, 32 or 64 columns, 1, 2 or 4 warps) and the chunked PyTorch form (``chunked.py``):

    B=256, L=256:  4.43  (next 5.10: 32 columns, 2 warps)   chunked 15.66
    B=128, L=512:  4.34  (next 4.94: 32 columns, 2 warps)   chunked 16.04

Forward alone is not faster with this launch (1.79 ms against 1.09 with 32 columns and one warp at B=256, L=256),
but the backward dominates.

Every walk loads step t's rows (and, in the backward, S_{t-1} from the stored states or the chunk's scratch) during
step t - 1 (t + 1 walking back; half's rows t + 2): none of them depends on the carried state, so their latency
hides behind a step's work instead of stalling each step. Against the kernel that loaded each step's rows when the
step began, side by side in one process on an H100 80GB (torch 2.11, Triton 3.6, bf16 inputs, K = V = 64, this
launch), forward / forward + backward in ms::

    B=256, L=256, H=2:  all 1.630 / 4.315 -> 1.123 / 3.301    chunked 1.087 / 4.577 -> 0.450 / 3.221
    B=128, L=512, H=2:  all 1.570 / 4.203 -> 0.908 / 3.079    chunked 1.095 / 4.585 -> 0.432 / 3.184
    B=512, L=128, H=4:  all 1.594 / 8.224 -> 0.697 / 6.088    chunked 1.595 / 8.220 -> 0.696 / 6.093

(the "all" row of the last shape ran chunked: its states exceed the budget). The two modes then cost about the
same, and all stayed the default until half. Results differ from the earlier kernel's by rounding only (largest
difference 1.2e-3 of the largest value, the gradients being bf16).

dr, dk, db, dw and da sum over V, so each program writes its own partial over its value columns into an
(NV, B, L, H, K) float32 buffer and the wrapper sums them: no atomics, so a run is bit-reproducible. dv sums over K,
inside the program, and is written directly. No host syncs: forward and backward can be captured in a CUDA graph.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from zoo.kernels.partial_sums import sum_blocks
from zoo.kernels.stored_states import (check_states, check_states_dtype, constexprs, keep_state, kept_state,
                                       kernel_n_states, n_states, states_mode)

# Largest (B H, n, K, V) state tensor a call keeps in "auto" (PREFERRED's n); above it the chunked mode keeps
# 1/CHUNK of every state. At K = V = 64 the budget holds B H n <= 2^18 float32 states (2^19 in bf16): every state up
# to B=256, H=2, L=511 (zoo's training shapes are smaller). The budget is per call, so a deep model near it keeps a
# multiple of it and may want it lower. It must stay at most 2^31 elements (8 GiB of float32, 4 GiB of bf16): the
# kernels address the states with int32 offsets.
STATE_BUDGET_BYTES = 4 * 2**30

# "auto"'s mode where the states fit the budget
PREFERRED = "half"

# Chunked mode: steps between stored states. They cost 1/CHUNK of storing every S_t, while the backward's scratch
# (CHUNK states per program: 64 KiB at K=64 and the default block_v=16) should stay in L2 for the resident programs
# (an estimate, not profiled).
CHUNK = 16


@triton.jit
def _row(ptr, i_b, t, i_h, idx, s_b, s_t, s_h, s_d, mask):
    """Row (i_b, t, i_h) of a (B, L, H, D) tensor with any strides, entries ``idx``, in float32."""
    return tl.load(ptr + i_b * s_b + t * s_t + i_h * s_h + idx * s_d, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _stored_states(state_ptr, i_bh, kk, vv, L, K, V, CHUNK: tl.constexpr, STORE_ALL: tl.constexpr,
                   EVERY: tl.constexpr):
    """(BK, BV) pointers to this program's stored state 0 (+ s * K * V: state s) in a (B H, n_states, K, V) tensor.
    All and half walk the sequence as one span and store S_s, the state after s steps, for s = 0 (the span's entry
    store) to L, every EVERY-th s (at s // EVERY) and S_L (at cdiv(L, EVERY)); chunked stores the state entering
    chunk s."""
    n_states = kernel_n_states(L, CHUNK, STORE_ALL, EVERY)
    return state_ptr + (i_bh * n_states * K + kk[:, None]) * V + vv[None, :]


@triton.jit
def _program(state_ptr, L, H, K, V, BK: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, STORE_ALL: tl.constexpr,
             EVERY: tl.constexpr):
    """This program's batch, head, value block, index vectors, masks, span (steps between stored states) and stored
    state pointers."""
    i_v = tl.program_id(0)  # value blocks of one head are neighbours: they read the same r, w, k, a, b rows
    i_bh = tl.program_id(1)
    kk = tl.arange(0, BK)
    vv = i_v * BV + tl.arange(0, BV)
    kmask = kk < K
    vmask = vv < V
    span = L if STORE_ALL else CHUNK
    states = _stored_states(state_ptr, i_bh, kk, vv, L, K, V, CHUNK, STORE_ALL, EVERY)
    return i_v, i_bh, i_bh // H, i_bh % H, kk, vv, kmask, vmask, span, states


@triton.jit
def _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, t, i_h, kk, vv, kmask, vmask,
               sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d, sv_b, sv_t, sv_h, sv_d,
               sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d, HAS_R: tl.constexpr = True):
    """Step t's rows in float32: r_t, w_t, k_t, a_t, b_t (K entries) and v_t (this program's block of V); without
    ``HAS_R``, for a walk that needs no r, w_t stands in for r_t."""
    wt = _row(w_ptr, i_b, t, i_h, kk, sw_b, sw_t, sw_h, sw_d, kmask)
    if HAS_R:
        rt = _row(r_ptr, i_b, t, i_h, kk, sr_b, sr_t, sr_h, sr_d, kmask)
    else:
        rt = wt
    kt = _row(k_ptr, i_b, t, i_h, kk, sk_b, sk_t, sk_h, sk_d, kmask)
    at = _row(a_ptr, i_b, t, i_h, kk, sa_b, sa_t, sa_h, sa_d, kmask)
    bt = _row(b_ptr, i_b, t, i_h, kk, sb_b, sb_t, sb_h, sb_d, kmask)
    vt = _row(v_ptr, i_b, t, i_h, vv, sv_b, sv_t, sv_h, sv_d, vmask)
    return rt, wt, kt, at, bt, vt


@triton.jit
def _advance(S, wt, kt, at, bt, vt):
    """S_t from S_{t-1} (this program's (BK, BV) slice) and step t's rows: one step of the recurrence."""
    sa = tl.sum(at[:, None] * S, axis=0)  # (BV): a_t^T S_{t-1}
    return tl.exp(wt)[:, None] * S + bt[:, None] * sa[None, :] + kt[:, None] * vt[None, :]


@triton.jit
def _fwd_step(S, rows, o_ptr, i_b, t, i_h, L, H, V, vv, vmask):
    """Step t of the forward walk: S_t from S_{t-1} and step t's rows, and its output row o_t = S_t^T r_t, stored."""
    rt, wt, kt, at, bt, vt = rows
    S = _advance(S, wt, kt, at, bt, vt)
    tl.store(o_ptr + ((i_b * L + t) * H + i_h) * V + vv, tl.sum(rt[:, None] * S, axis=0), mask=vmask)
    return S


@triton.jit
def _rwkv7_fwd_kernel(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, o_ptr, state_ptr, L, H, K, V,
                      sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                      sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d,
                      BK: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, STORE_ALL: tl.constexpr,
                      EVERY: tl.constexpr):
    i_v, i_bh, i_b, i_h, kk, vv, kmask, vmask, _, states = _program(state_ptr, L, H, K, V, BK, BV, CHUNK, STORE_ALL,
                                                                       EVERY)
    smask = kmask[:, None] & vmask[None, :]
    # padded rows and columns stay 0: their k, b (rows) and v (columns) load as 0
    S = tl.zeros([BK, BV], dtype=tl.float32)
    if STORE_ALL:
        # two steps a loop step: with EVERY = 2 the state to keep is the loop step's last (no branch each step), and
        # the two steps' work off the chain (their outputs' sums over K) can overlap the next step's; the next two
        # steps' rows are loaded during these
        keep_state(states, S, smask)
        rows = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, 0, i_h, kk, vv, kmask, vmask,
                          sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                          sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d)
        rows_1 = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, tl.minimum(1, L - 1), i_h, kk, vv, kmask,
                            vmask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                            sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d)
        for j in range(L // 2):
            t = 2 * j
            now, now_1 = rows, rows_1
            rows = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, tl.minimum(t + 2, L - 1), i_h, kk, vv,
                              kmask, vmask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                              sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d)
            rows_1 = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, tl.minimum(t + 3, L - 1), i_h, kk, vv,
                                kmask, vmask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                                sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d)
            S = _fwd_step(S, now, o_ptr, i_b, t, i_h, L, H, V, vv, vmask)
            if EVERY == 1:
                keep_state(states + (t + 1) * K * V, S, smask)
            S = _fwd_step(S, now_1, o_ptr, i_b, t + 1, i_h, L, H, V, vv, vmask)
            keep_state(states + ((t + 2) // EVERY) * K * V, S, smask)
        if L % 2 == 1:  # the last step alone; S_L is kept at cdiv(L, EVERY) in both modes
            S = _fwd_step(S, rows, o_ptr, i_b, L - 1, i_h, L, H, V, vv, vmask)
            keep_state(states + ((L + EVERY - 1) // EVERY) * K * V, S, smask)
    else:
        # chunked: the state entering each chunk is kept; step t's rows are loaded during step t - 1 (the last step
        # reloads its own): none depends on the carried state, so their latency hides behind a step's work
        rows = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, 0, i_h, kk, vv, kmask, vmask,
                          sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                          sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d)
        for c in range(tl.cdiv(L, CHUNK)):
            keep_state(states + c * K * V, S, smask)
            for t in range(c * CHUNK, tl.minimum(c * CHUNK + CHUNK, L)):
                now = rows
                rows = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, tl.minimum(t + 1, L - 1), i_h, kk,
                                  vv, kmask, vmask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h,
                                  sk_d, sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d)
                S = _fwd_step(S, now, o_ptr, i_b, t, i_h, L, H, V, vv, vmask)


@triton.jit
def _rwkv7_bwd_kernel(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, state_ptr, do_ptr, scratch_ptr,
                      dr_ptr, dw_ptr, dk_ptr, dv_ptr, da_ptr, db_ptr, L, H, K, V, Bsz,
                      sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                      sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d,
                      sdo_b, sdo_t, sdo_h, sdo_d,
                      BK: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, STORE_ALL: tl.constexpr,
                      EVERY: tl.constexpr):
    # spans and stored states as in the forward: all and half walk the sequence once, reading S_{t-1} from the states
    # (with EVERY = 2, an S_{t-1} not stored is one step from S_{t-2}, which is)
    i_v, i_bh, i_b, i_h, kk, vv, kmask, vmask, span, states = _program(state_ptr, L, H, K, V, BK, BV, CHUNK, STORE_ALL,
                                                                       EVERY)
    smask = kmask[:, None] & vmask[None, :]
    if not STORE_ALL:
        # this program's scratch: slot s holds the state entering step s of the current chunk
        scratch = (scratch_ptr + (i_bh * tl.num_programs(0) + i_v) * CHUNK * BK * BV
                   + tl.arange(0, BK)[:, None] * BV + tl.arange(0, BV)[None, :])
    dS = tl.zeros([BK, BV], dtype=tl.float32)  # dL/dS_t, carried backwards in time across spans
    n_spans = tl.cdiv(L, span)
    # the reverse walk's output gradient and S_{t-1} (from the stored states, or in the chunked mode from the chunk's
    # scratch) are loaded during step t + 1, as in the forward, and so are its rows, except with every other state
    # stored: step t needs step t - 1's rows to recompute an S_{t-1} not stored, so they are loaded during step t + 2
    # (held that far ahead in the other modes, they cost registers and time: module docstring)
    HALF: tl.constexpr = STORE_ALL and EVERY == 2
    rows = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, L - 1, i_h, kk, vv, kmask, vmask,
                      sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d, sv_b, sv_t, sv_h, sv_d,
                      sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d)
    if HALF:
        rows_before = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, tl.maximum(L - 2, 0), i_h, kk, vv,
                                 kmask, vmask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                                 sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d)
    do_next = _row(do_ptr, i_b, L - 1, i_h, vv, sdo_b, sdo_t, sdo_h, sdo_d, vmask)
    if STORE_ALL:  # S_s, the last stored state at or before S_{L-1}
        S_prev_next = kept_state(states + ((L - 1) // EVERY) * K * V, smask)
    else:  # each chunk loads its own first S_{t-1} from its scratch; until then a zero tile of the right shape
        S_prev_next = dS
    for ci in range(n_spans):
        c = n_spans - 1 - ci
        start = c * span
        end = tl.minimum(start + span, L)
        if STORE_ALL:
            S = kept_state(states + ((L + EVERY - 1) // EVERY) * K * V, smask)
        else:
            S = kept_state(states + c * K * V, smask)
            walk = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, start, i_h, kk, vv, kmask, vmask,
                              sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                              sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d, False)
            for t in range(start, end):
                tl.store(scratch + (t - start) * BK * BV, S)
                _, wt, kt, at, bt, vt = walk  # this walk needs no r
                walk = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, tl.minimum(t + 1, L - 1), i_h, kk,
                                  vv, kmask, vmask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h,
                                  sk_d, sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d,
                                  False)
                S = _advance(S, wt, kt, at, bt, vt)
            # the reverse walk reads scratch slots other threads of this program may have written
            tl.debug_barrier()
            S_prev_next = tl.load(scratch + (end - 1 - start) * BK * BV)
        for i in range(end - start):
            t = end - 1 - i
            # S is S_t, S_prev S_{t-1}
            rt, wt, kt, at, bt, vt = rows
            dot = do_next
            S_prev = S_prev_next
            tp = tl.maximum(t - 1, 0)
            if HALF:
                rows = rows_before  # step t - 1's
                if t % 2 == 1:  # S_{t-1} is not stored: one step of the forward from S_{t-2}
                    _, w1, k1, a1, b1, v1 = rows
                    S_prev = _advance(S_prev, w1, k1, a1, b1, v1)
                rows_before = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, tl.maximum(t - 2, 0), i_h, kk,
                                         vv, kmask, vmask, sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t,
                                         sk_h, sk_d, sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h,
                                         sb_d)
            else:
                rows = _step_rows(r_ptr, w_ptr, k_ptr, v_ptr, a_ptr, b_ptr, i_b, tp, i_h, kk, vv, kmask, vmask,
                                  sr_b, sr_t, sr_h, sr_d, sw_b, sw_t, sw_h, sw_d, sk_b, sk_t, sk_h, sk_d,
                                  sv_b, sv_t, sv_h, sv_d, sa_b, sa_t, sa_h, sa_d, sb_b, sb_t, sb_h, sb_d)
            do_next = _row(do_ptr, i_b, tp, i_h, vv, sdo_b, sdo_t, sdo_h, sdo_d, vmask)
            if STORE_ALL:
                S_prev_next = kept_state(states + (tp // EVERY) * K * V, smask)
            else:  # from this chunk's scratch (at its first step, slot 0 again: the next chunk reloads its own)
                S_prev_next = tl.load(scratch + tl.maximum(t - 1 - start, 0) * BK * BV)
            dS += rt[:, None] * dot[None, :]
            sa = tl.sum(at[:, None] * S_prev, axis=0)  # recomputed, not saved: (BV)
            dsa = tl.sum(dS * bt[:, None], axis=0)  # (BV): dL/d(sa_t)
            dv = tl.sum(dS * kt[:, None], axis=0)  # complete: this program holds every row of K
            ew = tl.exp(wt)
            # partial sums over this program's value columns
            part = ((i_v * Bsz + i_b) * L + t) * H * K + i_h * K + kk
            tl.store(dr_ptr + part, tl.sum(S * dot[None, :], axis=1), mask=kmask)
            tl.store(dk_ptr + part, tl.sum(dS * vt[None, :], axis=1), mask=kmask)
            tl.store(db_ptr + part, tl.sum(dS * sa[None, :], axis=1), mask=kmask)
            tl.store(dw_ptr + part, ew * tl.sum(dS * S_prev, axis=1), mask=kmask)
            tl.store(da_ptr + part, tl.sum(S_prev * dsa[None, :], axis=1), mask=kmask)
            tl.store(dv_ptr + ((i_b * L + t) * H + i_h) * V + vv, dv, mask=vmask)
            dS = ew[:, None] * dS + at[:, None] * dsa[None, :]  # dL/dS_{t-1}
            S = S_prev
        if not STORE_ALL:
            # the next chunk's forward walk overwrites slots this walk read
            tl.debug_barrier()


class Launch(NamedTuple):
    """How the kernels are launched: value columns per program (a power of two), warps per program, software-
    pipelining stages of the time loop, which states the forward keeps for the backward (``"auto"``:
    ``PREFERRED`` within ``STATE_BUDGET_BYTES``, else chunked; ``"all"``, ``"half"`` or ``"chunked"`` to choose,
    ``zoo.kernels.stored_states``) and in which dtype (float32, or bf16 for half the memory). The defaults were the
    fastest forward + backward measured (module docstring), bf16 states aside: faster in the kernel bench (2.268
    against 2.668 ms at B=256, L=256, H=2, K=V=64, bf16 inputs, an H200), but RWKV-7's training step took 8.03 ms
    at the tree that kept bf16 states for 16-bit inputs and before it (``zoo.bench.step``, figure-2 cell, same
    machine; whether the layer's inputs reached the kernel as bf16 there was not checked), so they stay an
    option."""
    block_v: int = 16
    num_warps: int = 1
    num_stages: int = 1
    states: str = "auto"
    states_dtype: torch.dtype = torch.float32


def _blocks(K: int, V: int, launch: Launch) -> tuple[int, int]:
    """(BK, BV): all of K (padded to a power of two) and a block of V."""
    return triton.next_power_of_2(K), min(triton.next_power_of_2(V), launch.block_v)


def _states_mode(Bsz: int, L: int, H: int, K: int, V: int, states: str, dtype: torch.dtype) -> str:
    """The mode a call runs (``zoo.kernels.stored_states.states_mode``): ``PREFERRED`` where its (B H, n, K, V)
    states of ``dtype`` fit ``STATE_BUDGET_BYTES``, else chunked, unless ``states`` names one."""
    return states_mode(states, L, Bsz * H * K * V * dtype.itemsize, STATE_BUDGET_BYTES, CHUNK, PREFERRED)


class RWKV7Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, r, w, k, v, a, b, launch):
        Bsz, L, H, K = r.shape
        V = v.shape[-1]
        o = torch.empty(Bsz, L, H, V, device=r.device, dtype=torch.float32)
        mode = _states_mode(Bsz, L, H, K, V, launch.states, launch.states_dtype)
        states = torch.empty(Bsz * H, n_states(L, mode, CHUNK), K, V, device=r.device, dtype=launch.states_dtype)
        assert states.numel() < 2**31, "rwkv7 fused recurrence: the stored states exceed int32 offsets"
        BK, BV = _blocks(K, V, launch)
        _rwkv7_fwd_kernel[(triton.cdiv(V, BV), Bsz * H)](
            r, w, k, v, a, b, o, states, L, H, K, V,
            *r.stride(), *w.stride(), *k.stride(), *v.stride(), *a.stride(), *b.stride(),
            BK=BK, BV=BV, **constexprs(mode, CHUNK), num_warps=launch.num_warps, num_stages=launch.num_stages)
        ctx.save_for_backward(r, w, k, v, a, b, states)
        ctx.states = mode
        ctx.chunk = CHUNK  # the states' spacing: CHUNK may change (tests) between forward and backward
        ctx.launch = launch
        return o

    @staticmethod
    def backward(ctx, do):
        r, w, k, v, a, b, states = ctx.saved_tensors
        Bsz, L, H, K = r.shape
        V = v.shape[-1]
        launch = ctx.launch
        BK, BV = _blocks(K, V, launch)
        nv = triton.cdiv(V, BV)

        def partial():
            return torch.empty(nv, Bsz, L, H, K, device=r.device, dtype=torch.float32)

        dr, dw, dk, da, db = (partial() for _ in range(5))
        dv = torch.empty(v.shape, device=v.device, dtype=v.dtype)
        scratch = (torch.empty(Bsz * H * nv, ctx.chunk, BK, BV, device=r.device, dtype=torch.float32)
                   if ctx.states == "chunked" else None)
        _rwkv7_bwd_kernel[(nv, Bsz * H)](
            r, w, k, v, a, b, states, do, scratch, dr, dw, dk, dv, da, db, L, H, K, V, Bsz,
            *r.stride(), *w.stride(), *k.stride(), *v.stride(), *a.stride(), *b.stride(), *do.stride(),
            BK=BK, BV=BV, **constexprs(ctx.states, ctx.chunk), num_warps=launch.num_warps,
            num_stages=launch.num_stages)
        # the partials over value blocks summed, each into its input's dtype
        return (sum_blocks(dr, r.dtype), sum_blocks(dw, w.dtype), sum_blocks(dk, k.dtype), dv, sum_blocks(da, a.dtype),
                sum_blocks(db, b.dtype), None)


def rwkv7_fused(r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                b: torch.Tensor, launch: Launch = Launch()) -> torch.Tensor:
    """``rwkv7_naive``'s result from the Triton kernels above, in float32.

    r, w, k, a, b: (B, L, H, K), w the log decays (< 0); v: (B, L, H, V) -> o: (B, L, H, V) float32. Inputs may be
    any float dtype and strides (the math is float32); any K and V (padded to powers of two inside). ``launch``
    changes only the speed.
    """
    check_states(launch.states)
    check_states_dtype(launch.states_dtype)
    return RWKV7Function.apply(r, w, k, v, a, b, launch)

