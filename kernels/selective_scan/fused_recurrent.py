"""Triton selective scan with Mamba's elementwise work fused in (dt bias and softplus, D skip, silu(z) gate).

One program per (batch, block of channels) keeps its (N, BLOCK_E) float32 state on chip and walks time inside
the kernel; the backward walks time in reverse carrying dL/dh_t, and step t needs h_{t-1} and h_t. The wrapper
picks one of three modes per call (``Launch.states``; "auto": half where its states fit ``STATE_BUDGET_BYTES``, else
chunked):

* all: the forward writes every state, h_0 = 0 to h_L, a (Bt, L + 1, N, E) float32 tensor, and the backward reads
  h_t and h_{t-1} in one reverse walk, with no recompute. The walk is a chain of dependent steps: on an H100 (Bt=256,
  L=256, E=256, N=16, bf16 inputs, one training step of a 2-layer Mamba) the earlier kernel that stored every state
  (before the elementwise work was fused) took 1.07 ms of forward and 2.15 ms of backward per training step, the
  chunked mode 1.40 and 5.31 ms: its second walk per chunk doubles the chain.
* half (the default): the forward writes every other state (h_0, h_2, ..., and h_L), half the memory and half the
  writes, and the reverse walk makes each h_{t-1} not stored from h_{t-2} with one step of the forward (one
  (N, BLOCK_E) exp and multiply-add every other step, off the chain of dL/dh, from inputs it has already loaded:
  step t - 1's rows are loaded two steps ahead). Measured on an H100 80GB (``python -m zoo.kernels.bench
  --selective-scan 256,256,256,16 128,512,1024,16``: one layer's forward + backward, bf16 inputs, every option, one
  warp, one process), ms:

      Bt=256, L=256, E=256 (Mamba at d_model=128):   half 1.19 (16 channels: 1.45)   all 1.36 (1.47)
                                                     chunked 1.61 (1.55)
      Bt=128, L=512, E=1024 (d_model=512, N=512):    half 4.61 (5.29)   all 5.32 (5.64)   chunked 5.65 (5.98)

  (earlier (BLOCK_E, N) tiles, 32 channels a program; in brackets the same mode with 16, the default until then,
  when "auto" stored every state where it fit). At the first shape the forward takes 0.34 ms in half against 0.52
  ms storing every state. The backward costs the same in both (about 0.85 ms): the recompute hides behind the
  walk's chain.
* chunked, where every other state would exceed the budget: the forward stores only the state entering each chunk
  of ``CHUNK`` steps (1/CHUNK of the memory), and the backward, chunk by chunk from the last, walks the chunk
  forward again from that state (keeping each step's incoming state in a per-program scratch of CHUNK states,
  meant to stay in L2), then walks it back in reverse.

Tiles are (N, BLOCK_E), channels across a warp's lanes (A and the states are laid out (N, E) to match, so loads and
stores are coalesced and Triton keeps that layout through the walk). The earlier (BLOCK_E, N) tiles put 16 lanes
along N and cost the backward 194 warp shuffles per step (counted in its PTX for sm_90), most of them in its three sums
over N; with channels across the lanes those sums stay inside each thread, and its two sums over channels (dB, dC)
take 160 shuffles. (Those counts come from a compile without the JIT's specialization. Compiled as the JIT
specializes a launch at Bt=256, L=256, E=256 (unit strides constexpr, sizes and pointers divisible by 16; Triton 3.9
on a CPU, sm_90; the GPU's Triton 3.6 was not inspected), a tile is 8 states x 4 channels a thread over 2 x 16 lanes:
the backward held 132 shuffles, 255 registers and 192 bytes of spills, so an SM holds at most 8 of its one-warp
programs, about what the launch's 1024 programs give 132 SMs; 254 registers and 40 bytes of spills since it loads
its stored states as their steps start, below.) Measured on an H100 80GB in one process (forward +
backward of one layer's call, bf16 inputs, every option), ms, the earlier tiles with 32 channels a program against
these with ``_block_e``'s channels: 1.593 -> 1.366 at Bt=256, L=256, E=256 (64 channels), 5.192 -> 4.926 at
Bt=128, L=512, E=1024 (64), 2.800 -> 2.705 at Bt=256, L=256, E=512 (64), 1.408 -> 1.350 at Bt=128, L=512, E=128
(16). The forward alone got slower at the first shape (0.418 -> 0.526 ms) while the backward got faster (1.175 ->
0.840). The timings in the list above were taken with the earlier tiles.

Launch: one warp per backward program keeps a program's sums over its channels inside one warp, with no
shared-memory round trip per step. 2 warps were slower at every shape above (1.62 and 7.22 ms with 32 channels), 4
warps and 2 software-pipelining stages slower or the same wherever measured (an H200, 16 channels, storing every
state: 1.42 ms against 2.23 with 32 channels and 4 warps, the default before that, at Bt=256, L=256, E=256).

The forward walks two steps a loop step where it keeps states in one span (all and half), so that with every other
state kept the state to store is the loop step's last (no masked store each step), and the two steps' work off the
chain (their exponentials, their outputs' sums over N) can overlap. It has its own launch, 64 channels and 2 warps a
program (``Launch.forward_block_e``, ``forward_warps``). Forward alone, ms, best of two rounds of ``do_bench`` in one
process on an H100 80GB, bf16 inputs, every option, half mode, the one-step walk at its best of 8 launches (16 to 128
channels, 1 to 4 warps) against the two-step walk at 64 channels and 2 warps:

    Bt, L, E (N=16)     one step          two steps
    256, 256, 256       0.333 (64, 1)     0.295
    128, 512, 1024      1.397 (64, 1)     1.137
    128, 512, 512       0.665 (64, 1)     0.580
    128, 512, 128       0.382 (16, 1)     0.282
    512, 128, 512       0.615 (64, 1)     0.585

The one-step walk was no faster at 2 warps than at 1 (0.349, 1.457 ms at the first two shapes). A two-step reverse
walk for the backward (odd step t, whose h_{t-1} is stored, then t - 1 from the recomputed h_t, sharing that
recompute's decay) was no faster at any launch tried, 1 or 2 warps and 32 or 64 channels (1.130 against 1.135 ms
forward + backward at the first shape): compiled for sm_90 it holds 255 registers and spills 450 to 950 bytes at
64 channels, and at 32 fits but leaves twice the programs.

The stored states are float32, or bf16 where ``Launch.states_dtype`` asks (``zoo.kernels.stored_states``): y is
unchanged, the gradients carry bf16's rounding of h. They are the largest memory traffic of both kernels (at
Bt=128, L=512, E=1024, N=16, 2.15 GB written and read back a call in float32, against 0.13 GB for each (Bt, L, E)
bf16 input), yet bf16 states made the scan slower on an H200 (the forward 0.256 -> 0.335 ms at Bt=256, L=256,
E=256; 0.987 -> 1.306 ms at the shape above, at the default launch): they halve the memory, not the time.

Loading ahead: every walk loads step t's input rows (u, dt, B, C, z, the output gradient, and in the chunked
backward h_{t-1} from its scratch) during the step before, so a load's latency overlaps a step's work instead of
stalling the chain.
Measured on an H100 80GB in one process against the kernel that loaded each row when its step began (forward /
forward + backward of one layer's call, ms, bf16 inputs, every option, default launch): store-all 0.521 / 1.549 ->
0.523 / 1.347 at Bt=256, L=256, E=256, N=16; 0.483 / 1.310 -> 0.443 / 1.028 at Bt=128, L=512, E=128; 1.038 / 3.046
-> 1.036 / 2.635 at Bt=256, L=256, E=512. The forward, bound by writing the states, did not change; the backward
went 13 to 22% faster. Chunked mode gained more (1.859 -> 1.516 at the first shape) and was still slower than
storing every state. Its reverse walk then still read each h_{t-1} from the scratch when its step began; it now
loads that ahead too. The arithmetic is the same; the compiled code may contract multiplies and adds
into fused ones differently, so results are not bit-identical to the earlier kernel's (the tests against the
recurrence pass).

The backward in all and half modes once loaded its stored h_{t-1} a step ahead too. It now loads it as step t
starts: the (N, BLOCK_E) tile held across a step cost the walk its registers (compiled as the JIT specializes the
figure-2 launch: 192 -> 40 bytes of spills, 2120 -> 1888 instructions), and its load is not on the chain of dL/dh
(h_{t-1} first meets the carried gradient in the decay's gradient, late in the step). Forward + backward, ms, best
of three interleaved rounds of ``do_bench`` in one process on an H100 80GB, bf16 inputs, every option, default
launch, state one step ahead -> as the step starts: 1.192 -> 1.061 at Bt=256, L=256, E=256; 4.093 -> 3.626 at
Bt=128, L=512, E=1024; 2.095 -> 1.851 at Bt=128, L=512, E=512; 2.090 -> 1.874 at Bt=512, L=128, E=512 (10 to 12%
less; the forward is unchanged).

A chunk-parallel form (a chunk of 8 to 32 steps loaded at once and combined by ``tl.associative_scan`` over a
(chunk, channels, N) tile, the backward recomputing the chunk and scanning dL/dh in reverse) was tried and measured
slower on an H200 at every launch choice: forward + backward 4.8 ms at best against this kernel's 1.4 ms at Bt=256,
L=256, E=256, N=16 (``results/SPEED.md``).

Each program scales its A tile by log2(e) once and takes every decay as exp2(dt A log2(e)): Triton's exp is exp2
of its argument times log2(e), so this saves a multiply per element of each exponential (compiled for sm_90 as the
JIT specializes the figure-2 launch: 1944 -> 1592 instructions in the forward, 2336 -> 2120 in the backward). The
backward's dL/d dt, a sum of dL/d(dt A) * A over N, takes the scaled A and multiplies the sum by ln 2. Forward /
forward + backward, ms, best of three interleaved rounds of ``do_bench`` in one process on an H100 80GB: 0.294 /
1.096 -> 0.290 / 1.084 at Bt=256, L=256, E=256; 1.138 / 4.171 -> 1.128 / 4.098 at Bt=128, L=512, E=1024; 0.580 /
2.131 -> 0.574 / 2.097 at Bt=128, L=512, E=512; 0.582 / 2.133 -> 0.577 / 2.093 at Bt=512, L=128, E=512 (1 to 2%).

B and C are shared by all channels, so each program writes its own partial dB, dC (and dA, dD, d delta_bias over
the batch) and the wrapper sums them: no atomics, so a run is bit-reproducible.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from zoo.kernels.layout import channel_block
from zoo.kernels.partial_sums import sum_blocks, sum_first
from zoo.kernels.stable import sigmoid, sigmoid_of
from zoo.kernels.stored_states import (check_states, check_states_dtype, constexprs, keep_state, kept_state,
                                       kernel_n_states, n_states, states_mode)

# Largest state tensor a call keeps for the backward in "auto": half's (Bt, L // 2 + 1, N, E) or so; above it the
# chunked mode keeps 1/CHUNK of every state. The docstring's shapes keep 0.5 and 2.2 GB a layer in float32, half that
# in bf16. The budget is per call, so a deep model near it keeps a multiple of it and may want it lower. It must stay
# at most 2^31 elements (8 GiB of float32, 4 GiB of bf16): the kernels address the states with int32 offsets.
STATE_BUDGET_BYTES = 4 * 2**30

# Chunked mode: steps between stored states. They cost 1/CHUNK of storing every h_t, while the backward's scratch
# (CHUNK states per program: 64 KiB at BLOCK_E=64, N=16) should fit in L2 for the resident programs
# (an estimate, not profiled).
CHUNK = 16

# "auto" keeps every other state where they fit the budget: the fastest mode at every shape measured (module docstring)
PREFERRED = "half"


def _n_states(L: int, mode: str) -> int:
    """How many (N, E) states of a sequence ``mode`` keeps (``zoo.kernels.stored_states``)."""
    return n_states(L, mode, CHUNK)


def _states_mode(Bsz: int, L: int, E: int, N: int, states: str, dtype: torch.dtype) -> str:
    """The mode a call runs (``zoo.kernels.stored_states.states_mode``): half where its (Bsz, n, N, E) states of
    ``dtype`` fit ``STATE_BUDGET_BYTES``, else chunked, unless ``states`` names one."""
    return states_mode(states, L, Bsz * E * N * dtype.itemsize, STATE_BUDGET_BYTES, CHUNK, PREFERRED)


@triton.jit
def _softplus(x):
    """(softplus(x), sigmoid(x)): log(1 + exp(x)) as torch's softplus (x itself above 20), accurate where exp(x) is
    far below 1, and its derivative, from one exp."""
    e = tl.exp(-tl.abs(x))
    w = 1.0 + e
    # log1p(e): log(w) * e / (w - 1) divides out the rounding of 1 + e (and is e where 1 + e rounds to 1)
    log1p = tl.where(w == 1.0, e, tl.log(w) * e / (w - 1.0))
    return tl.where(x > 20.0, x, tl.maximum(x, 0.0) + log1p), sigmoid_of(x, e)


@triton.jit
def _row(ptr, b, t, e, s_b, s_t, s_e, mask):
    """Row t of sequence b of a (Bt, L, E) tensor with any strides, in float32."""
    return tl.load(ptr + b * s_b + t * s_t + e * s_e, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, t, e, n, emask, su_b, su_t, su_e, sdt_b, sdt_t, sdt_e,
               sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n, HAS_Z: tl.constexpr, HAS_C: tl.constexpr = True):
    """Step t's inputs in float32: u_t, dt_t (before bias and softplus), B_t, C_t and z_t (without z, u_t again;
    without ``HAS_C``, for a walk that needs no C, B_t again)."""
    ut = _row(u_ptr, b, t, e, su_b, su_t, su_e, emask)
    dtt = _row(dt_ptr, b, t, e, sdt_b, sdt_t, sdt_e, emask)
    Bt = tl.load(B_ptr + b * sB_b + t * sB_t + n * sB_n).to(tl.float32)
    if HAS_C:
        Ct = tl.load(C_ptr + b * sC_b + t * sC_t + n * sC_n).to(tl.float32)
    else:
        Ct = Bt
    if HAS_Z:
        zt = _row(z_ptr, b, t, e, sz_b, sz_t, sz_e, emask)
    else:
        zt = ut
    return ut, dtt, Bt, Ct, zt


@triton.jit
def _stored_states(state_ptr, b, e, n, L, E, N: tl.constexpr, CHUNK: tl.constexpr, STORE_ALL: tl.constexpr,
                   EVERY: tl.constexpr):
    """(N, BLOCK_E) pointers to this program's stored state 0 (+ k * E * N: state k). All and half walk the
    sequence as one span and store h_k, the state after k steps, for k = 0 (the span's entry store) to L, every
    EVERY-th k (at k // EVERY) and h_L (at cdiv(L, EVERY)); chunked stores the state entering chunk k."""
    n_states = kernel_n_states(L, CHUNK, STORE_ALL, EVERY)
    return state_ptr + (b * n_states * N + n[:, None]) * E + e[None, :]


@triton.jit
def _dt(dt_in, bias, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr):
    """(dt', softplus'(dt + bias)) for a row of dt before bias and softplus: dt' = softplus(dt + bias) with each term
    optional (without softplus the second value is dt' again, and unused)."""
    if HAS_BIAS:
        dt_in += bias
    if SOFTPLUS:
        dtt, gsoftplus = _softplus(dt_in)
    else:
        dtt, gsoftplus = dt_in, dt_in
    return dtt, gsoftplus


@triton.jit
def _advance(h, dt_in, ut, Bt, A, bias, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr):
    """The state after a step from h, the state before it, and the step's u, dt (before bias and softplus) and B
    rows: one step of the recurrence."""
    dtt, _ = _dt(dt_in, bias, HAS_BIAS, SOFTPLUS)
    return tl.exp2(dtt[None, :] * A) * h + (dtt * ut)[None, :] * Bt[:, None]


@triton.jit
def _fwd_step(h, rows, t, A, bias, Dskip, y_ptr, b, e, emask, L, E, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
              HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr):
    """Step t of the forward walk: the state after it from h, the state before it, and its output row, stored."""
    ut, dt_in, Bt, Ct, zt = rows
    h = _advance(h, dt_in, ut, Bt, A, bias, HAS_BIAS, SOFTPLUS)
    y = tl.sum(h * Ct[:, None], axis=0)
    if HAS_D:
        y += Dskip * ut
    if HAS_Z:
        y *= zt * sigmoid(zt)
    tl.store(y_ptr + (b * L + t) * E + e, y, mask=emask)
    return h


@triton.jit
def _scan_fwd_kernel(u_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr, y_ptr, state_ptr, L, E,
                     su_b, su_t, su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n,
                     N: tl.constexpr, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr, STORE_ALL: tl.constexpr,
                     EVERY: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr,
                     SOFTPLUS: tl.constexpr):
    b = tl.program_id(0)
    e = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    n = tl.arange(0, N)
    emask = e < E
    A = tl.load(A_ptr + n[:, None] * E + e[None, :], mask=emask[None, :], other=0.0) * 1.4426950408889634
    bias = tl.load(bias_ptr + e, mask=emask, other=0.0) if HAS_BIAS else tl.zeros([BLOCK_E], dtype=tl.float32)
    Dskip = tl.load(D_ptr + e, mask=emask, other=0.0) if HAS_D else tl.zeros([BLOCK_E], dtype=tl.float32)
    states = _stored_states(state_ptr, b, e, n, L, E, N, CHUNK, STORE_ALL, EVERY)
    h = tl.zeros([N, BLOCK_E], dtype=tl.float32)
    keep_state(states, h, emask[None, :])
    if STORE_ALL:
        # two steps a loop step, so the state to keep is the loop step's last (with EVERY = 2) and the two steps'
        # independent work (their exponentials, their outputs' sums) can overlap; the next two steps' rows are loaded
        # during these (none depends on the carried state, so their latency hides behind the steps' work)
        rows = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, 0, e, n, emask, su_b, su_t, su_e, sdt_b, sdt_t,
                          sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n, HAS_Z)
        rows_1 = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, tl.minimum(1, L - 1), e, n, emask, su_b, su_t,
                            su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n, HAS_Z)
        for j in range(L // 2):
            t = 2 * j
            now, now_1 = rows, rows_1
            rows = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, tl.minimum(t + 2, L - 1), e, n, emask, su_b,
                              su_t, su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n,
                              HAS_Z)
            rows_1 = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, tl.minimum(t + 3, L - 1), e, n, emask, su_b,
                                su_t, su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t,
                                sC_n, HAS_Z)
            h = _fwd_step(h, now, t, A, bias, Dskip, y_ptr, b, e, emask, L, E, HAS_D, HAS_Z, HAS_BIAS, SOFTPLUS)
            if EVERY == 1:
                keep_state(states + (t + 1) * E * N, h, emask[None, :])
            h = _fwd_step(h, now_1, t + 1, A, bias, Dskip, y_ptr, b, e, emask, L, E, HAS_D, HAS_Z, HAS_BIAS,
                          SOFTPLUS)
            keep_state(states + ((t + 2) // EVERY) * E * N, h, emask[None, :])
        if L % 2 == 1:  # the last step alone; h_L is stored at cdiv(L, EVERY) in both modes
            h = _fwd_step(h, rows, L - 1, A, bias, Dskip, y_ptr, b, e, emask, L, E, HAS_D, HAS_Z, HAS_BIAS,
                          SOFTPLUS)
            keep_state(states + ((L + EVERY - 1) // EVERY) * E * N, h, emask[None, :])
    else:
        # chunked: the state entering each chunk is kept; step t's rows are loaded during step t - 1
        rows = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, 0, e, n, emask, su_b, su_t, su_e, sdt_b, sdt_t,
                          sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n, HAS_Z)
        for c in range(tl.cdiv(L, CHUNK)):
            if c > 0:
                keep_state(states + c * E * N, h, emask[None, :])
            for t in range(c * CHUNK, tl.minimum(c * CHUNK + CHUNK, L)):
                now = rows
                rows = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, tl.minimum(t + 1, L - 1), e, n, emask,
                                  su_b, su_t, su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n,
                                  sC_b, sC_t, sC_n, HAS_Z)
                h = _fwd_step(h, now, t, A, bias, Dskip, y_ptr, b, e, emask, L, E, HAS_D, HAS_Z, HAS_BIAS,
                              SOFTPLUS)


@triton.jit
def _scan_bwd_kernel(u_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bias_ptr, state_ptr, gy_ptr, scratch_ptr,
                     gu_ptr, gdt_ptr, gz_ptr, gA_ptr, gB_ptr, gC_ptr, gD_ptr, gbias_ptr, L, E, Bsz,
                     su_b, su_t, su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n,
                     sgy_b, sgy_t, sgy_e,
                     N: tl.constexpr, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr, STORE_ALL: tl.constexpr,
                     EVERY: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr,
                     SOFTPLUS: tl.constexpr):
    b = tl.program_id(0)
    pe = tl.program_id(1)
    e = pe * BLOCK_E + tl.arange(0, BLOCK_E)
    n = tl.arange(0, N)
    emask = e < E
    A = tl.load(A_ptr + n[:, None] * E + e[None, :], mask=emask[None, :], other=0.0) * 1.4426950408889634
    bias = tl.load(bias_ptr + e, mask=emask, other=0.0) if HAS_BIAS else tl.zeros([BLOCK_E], dtype=tl.float32)
    if HAS_BIAS:
        gbias = tl.zeros([BLOCK_E], dtype=tl.float32)
    if HAS_D:
        Dskip = tl.load(D_ptr + e, mask=emask, other=0.0)
        gD = tl.zeros([BLOCK_E], dtype=tl.float32)
    # spans and stored states as in the forward: all and half walk the sequence once, reading h_{t-1} from the states
    # (with EVERY = 2, an h_{t-1} not stored is one step from h_{t-2}, which is)
    span = L if STORE_ALL else CHUNK
    states = _stored_states(state_ptr, b, e, n, L, E, N, CHUNK, STORE_ALL, EVERY)
    if not STORE_ALL:
        # this program's scratch: slot s holds the state entering step s of the current chunk
        scratch = (scratch_ptr + (b * tl.num_programs(1) + pe) * CHUNK * BLOCK_E * N
                   + n[:, None] * BLOCK_E + tl.arange(0, BLOCK_E)[None, :])
    gh = tl.zeros([N, BLOCK_E], dtype=tl.float32)  # dL/dh_t, carried backwards in time across spans
    gA = tl.zeros([N, BLOCK_E], dtype=tl.float32)
    n_spans = tl.cdiv(L, span)
    # the reverse walk's rows of step t are loaded during step t + 2 (step t needs step t - 1's to recompute an
    # h_{t-1} not stored); its output gradient, and in the chunked mode its h_{t-1} from the chunk's scratch, during
    # step t + 1, as in the forward. A stored h_{t-1} is loaded as step t starts: held a step ahead, it cost the walk
    # registers and spills (module docstring)
    rows = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, L - 1, e, n, emask, su_b, su_t, su_e, sdt_b, sdt_t,
                      sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n, HAS_Z)
    rows_before = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, tl.maximum(L - 2, 0), e, n, emask, su_b, su_t,
                             su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n, HAS_Z)
    gy_next = _row(gy_ptr, b, L - 1, e, sgy_b, sgy_t, sgy_e, emask)
    if not STORE_ALL:  # each chunk loads its own first h_{t-1} from its scratch; until then a zero tile of its shape
        h_prev_next = gh
    for ci in range(n_spans):
        c = n_spans - 1 - ci
        start = c * span
        end = tl.minimum(start + span, L)
        if STORE_ALL:
            h = kept_state(states + ((L + EVERY - 1) // EVERY) * E * N, emask[None, :])
        else:
            h = kept_state(states + c * E * N, emask[None, :])
            walk = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, start, e, n, emask, su_b, su_t, su_e, sdt_b,
                              sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n, sC_b, sC_t, sC_n, False, False)
            for t in range(start, end):
                tl.store(scratch + (t - start) * BLOCK_E * N, h)
                ut, dtt, Bt, _, _ = walk  # this walk needs no C or z
                walk = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, tl.minimum(t + 1, L - 1), e, n, emask,
                                  su_b, su_t, su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n,
                                  sC_b, sC_t, sC_n, False, False)
                h = _advance(h, dtt, ut, Bt, A, bias, HAS_BIAS, SOFTPLUS)
            # the reverse walk reads scratch slots other threads of this program may have written
            tl.debug_barrier()
            h_prev_next = tl.load(scratch + (end - 1 - start) * BLOCK_E * N)
        for i in range(end - start):
            t = end - 1 - i
            # h is h_t, h_prev h_{t-1}; dt_in is dt before softplus; gy is dL/d(output), then dL/d(ungated y)
            ut, dt_in, Bt, Ct, zt = rows
            rows = rows_before  # step t - 1's
            gy = gy_next
            if STORE_ALL:  # h_k, the last stored state at or before h_{t-1}
                h_prev = kept_state(states + (t // EVERY) * E * N, emask[None, :])
            else:
                h_prev = h_prev_next
            if STORE_ALL and EVERY == 2:
                if t % 2 == 1:  # h_{t-1} is not stored: one step of the forward from h_{t-2}
                    u1, dt1, B1, _, _ = rows
                    h_prev = _advance(h_prev, dt1, u1, B1, A, bias, HAS_BIAS, SOFTPLUS)
            tp = tl.maximum(t - 1, 0)
            rows_before = _step_rows(u_ptr, dt_ptr, B_ptr, C_ptr, z_ptr, b, tl.maximum(t - 2, 0), e, n, emask,
                                     su_b, su_t, su_e, sdt_b, sdt_t, sdt_e, sz_b, sz_t, sz_e, sB_b, sB_t, sB_n,
                                     sC_b, sC_t, sC_n, HAS_Z)
            gy_next = _row(gy_ptr, b, tp, e, sgy_b, sgy_t, sgy_e, emask)
            if not STORE_ALL:  # from the chunk's scratch (at its first step slot 0 again: the next chunk loads its own)
                h_prev_next = tl.load(scratch + tl.maximum(t - 1 - start, 0) * BLOCK_E * N)
            dtt, gsoftplus = _dt(dt_in, bias, HAS_BIAS, SOFTPLUS)
            row = (b * L + t) * E + e
            if HAS_Z:
                sz = sigmoid(zt)
                y = tl.sum(h * Ct[:, None], axis=0)  # recomputed, not saved: one (N, BLOCK_E) product
                if HAS_D:
                    y += Dskip * ut
                tl.store(gz_ptr + row, gy * y * sz * (1.0 + zt * (1.0 - sz)), mask=emask)  # silu' = s (1 + z (1 - s))
                gy = gy * zt * sz
            gh += gy[None, :] * Ct[:, None]
            part = (pe * Bsz * L + b * L + t) * N + n
            tl.store(gC_ptr + part, tl.sum(h * gy[None, :], axis=1))
            tl.store(gB_ptr + part, tl.sum(gh * (dtt * ut)[None, :], axis=1))
            ghB = tl.sum(gh * Bt[:, None], axis=0)
            gh = gh * tl.exp2(dtt[None, :] * A)  # dL/dh_{t-1}
            gdecay = gh * h_prev  # dL/d(dt A) through the decay
            gdt = tl.sum(gdecay * A, axis=0) * 0.6931471805599453 + ut * ghB
            gu = dtt * ghB
            if HAS_D:
                gu += Dskip * gy
                gD += gy * ut
            if SOFTPLUS:
                gdt = gdt * gsoftplus
            if HAS_BIAS:
                gbias += gdt
            tl.store(gu_ptr + row, gu, mask=emask)
            tl.store(gdt_ptr + row, gdt, mask=emask)
            gA += gdecay * dtt[None, :]
            h = h_prev
        if not STORE_ALL:
            # the next chunk's forward walk overwrites slots this walk read
            tl.debug_barrier()
    tl.store(gA_ptr + (b * E + e[None, :]) * N + n[:, None], gA, mask=emask[None, :])
    if HAS_D:
        tl.store(gD_ptr + b * E + e, gD, mask=emask)
    if HAS_BIAS:
        tl.store(gbias_ptr + b * E + e, gbias, mask=emask)


class Launch(NamedTuple):
    """How the scan kernels are launched: the backward's channels per program (None: ``_block_e`` chooses) and warps
    per program, both kernels' software-pipelining stages of the time loop, which states the forward keeps for the
    backward (``"auto"``: every other state within ``STATE_BUDGET_BYTES``, else the chunked mode; ``"all"``,
    ``"half"`` or ``"chunked"`` to choose) and in which dtype (``states_dtype``: float32, or bf16 for half the
    memory), and the forward's channels per program (at most the input's, rounded up to a power of two) and warps.
    ``python -m zoo.kernels.bench --selective-scan ...`` times the choices on a GPU."""
    block_e: int | None = None
    num_warps: int = 1
    num_stages: int = 1
    states: str = "auto"
    states_dtype: torch.dtype = torch.float32
    # The forward's two-step walk took 64 channels and 2 warps a program at every shape measured on an H100 (``Bt,
    # L, E`` = 256, 256, 256; 128, 512, 1024; 128, 512, 512; 128, 512, 128; 512, 128, 512, N = 16; 8 launches of 16
    # to 128 channels and 1 to 4 warps): 5 to 26% faster than the one-step walk at its best launch. The backward,
    # which holds twice the (N, channels) tiles, was fastest at one warp.
    forward_block_e: int = 64
    forward_warps: int = 2


# The backward's channels per program when ``Launch.block_e`` is None: the most of 64 and 32 that still gives a
# launch this many programs (one warp each), else 16. On an H100 64 channels were fastest where they left 1024
# programs or more (Bt=256, E=256 and larger shapes), and 35% slower than 32 where they left 256 (Bt=128, E=128, where
# 16 channels, 1024 programs, were fastest). (Timed as forward + backward, when the forward took the same launch.)
MIN_PROGRAMS = 1024


def _block_e(Bsz: int, E: int, launch: Launch) -> int:
    """The backward's channels per program: ``launch.block_e``, or the most of 64, 32 that leaves ``MIN_PROGRAMS``
    programs, else 16."""
    return channel_block(launch.block_e, Bsz, E, (64, 32, 16), MIN_PROGRAMS)


def _strides(x: torch.Tensor | None) -> tuple[int, ...]:
    return (0, 0, 0) if x is None else x.stride()


def _f32(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.float().contiguous()


def _constexprs(mode: str, N: int, block: int, D, z, delta_bias, softplus: bool) -> dict:
    """The compile-time arguments the forward and backward kernels share, for a call in ``mode``."""
    return dict(N=N, BLOCK_E=block, **constexprs(mode, CHUNK),
                HAS_D=D is not None, HAS_Z=z is not None, HAS_BIAS=delta_bias is not None, SOFTPLUS=softplus)


class SelectiveScanFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt, A, B, C, D, z, delta_bias, delta_softplus, launch, out_dtype):
        Bsz, L, E = u.shape
        N = A.shape[1]
        # the kernels hold (N, channels) tiles, channels across a warp's lanes: A and the states are laid out so
        A, D, delta_bias = A.float().t().contiguous(), _f32(D), _f32(delta_bias)
        y = torch.empty(Bsz, L, E, device=u.device, dtype=out_dtype)
        mode = _states_mode(Bsz, L, E, N, launch.states, launch.states_dtype)
        states = torch.empty(Bsz, _n_states(L, mode), N, E, device=u.device, dtype=launch.states_dtype)
        block = min(triton.next_power_of_2(E), launch.forward_block_e)
        _scan_fwd_kernel[(Bsz, triton.cdiv(E, block))](
            u, dt, A, B, C, D, z, delta_bias, y, states, L, E,
            *u.stride(), *dt.stride(), *_strides(z), *B.stride(), *C.stride(),
            **_constexprs(mode, N, block, D, z, delta_bias, delta_softplus),
            num_warps=launch.forward_warps, num_stages=launch.num_stages)
        ctx.save_for_backward(u, dt, A, B, C, D, z, delta_bias, states)
        ctx.delta_softplus = delta_softplus
        ctx.states = mode
        ctx.launch = launch
        return y

    @staticmethod
    def backward(ctx, gy):
        u, dt, A, B, C, D, z, delta_bias, states = ctx.saved_tensors
        Bsz, L, E = u.shape
        N = A.shape[0]  # A is (N, E) here
        launch = ctx.launch
        block = _block_e(Bsz, E, launch)
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
        scratch = f32(Bsz * ne, CHUNK, N, block) if ctx.states == "chunked" else None
        _scan_bwd_kernel[(Bsz, ne)](
            u, dt, A, B, C, D, z, delta_bias, states, gy, scratch, gu, gdt, gz, gA, gB, gC, gD, gbias, L, E, Bsz,
            *u.stride(), *dt.stride(), *_strides(z), *B.stride(), *C.stride(), *gy.stride(),
            **_constexprs(ctx.states, N, block, D, z, delta_bias, ctx.delta_softplus),
            num_warps=launch.num_warps, num_stages=launch.num_stages)
        # autograd casts each gradient to its input's dtype. The partials over sequences (Bt rows) are finished by
        # zoo's row sum; gB's and gC's (ne rows of Bt L N values) by ``sum_blocks``, into B's and C's dtype
        return (gu, gdt, sum_first(gA), sum_blocks(gB, B.dtype), sum_blocks(gC, C.dtype),
                None if gD is None else sum_first(gD), gz, None if gbias is None else sum_first(gbias), None, None,
                None)


def selective_scan(u: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                   D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                   delta_bias: torch.Tensor | None = None, delta_softplus: bool = False,
                   launch: Launch = Launch(), out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Triton selective scan with ``selective_scan_naive``'s signature (N must be a power of two); returns y: (Bt,
    L, E) in ``out_dtype``, rounded from the float32 math as it is stored (a bf16 y is the float32 one cast, without
    the cast's own pass over memory, and its gradient is read as it comes). u, dt, z and B, C may be any float dtype
    and strides (e.g. bf16 views into one projection); the math is float32. ``launch`` (block_e a power of two)
    changes only the speed."""
    check_states(launch.states)
    check_states_dtype(launch.states_dtype)
    return SelectiveScanFunction.apply(u, dt, A, B, C, D, z, delta_bias, delta_softplus, launch, out_dtype)
