"""Which states a fused recurrence's forward keeps for its backward: shared by the selective scan
(``zoo.kernels.selective_scan.fused_recurrent``) and RWKV-7's recurrence (``zoo.kernels.rwkv7.fused_recurrent``).

Both walk a sequence of L steps, and the backward's reverse walk needs each step's incoming state. The modes:

* ``"all"``: the forward stores every state, the one entering the sequence and the one after each of its L steps
  (L + 1 of them); the backward reads them, with no recompute.
* ``"half"``: every other state (after 0, 2, 4, ... steps) and the last; the backward makes each missing one from the
  state before it with one step of the forward. Half the memory and half the forward's writes.
* ``"chunked"``: only the state entering each chunk of ``chunk`` steps; the backward walks each chunk forward again
  from it. 1/chunk of the memory.
* ``"auto"``: the recurrence's preferred mode (all or half, whichever it measured faster) where its states fit a
  byte budget, else chunked.

The states are kept in float32, or in bf16 where a launch asks (``states_dtype``): the forward walks in float32 and
rounds only what it stores, so its outputs do not change, and the backward's gradients carry bf16's rounding of
the states, as autocast's bf16 activations do elsewhere. bf16 halves the states' memory (so "auto" keeps every
other state for sequences twice as long before it falls back to chunks), but it is not the faster default: on an
H200 the selective scan's forward + backward took 1.109 against 1.011 ms (Bt=256, L=256, E=256, N=16) and 3.625
against 3.310 ms (Bt=128, L=512, E=1024) with bf16 states, while RWKV-7's took 2.268 against 2.668 ms (B=256, L=256,
H=2, K=V=64, bf16 inputs; ``python -m zoo.kernels.bench``, one process).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

STATES = ("auto", "all", "half", "chunked")
# steps between stored states in the modes that walk the sequence in one span
EVERY = {"all": 1, "half": 2}


def check_states(states: str) -> None:
    """ValueError unless ``states`` is one of ``STATES``."""
    if states not in STATES:
        raise ValueError(f"launch.states={states!r} is not valid: expected one of {', '.join(STATES)}")


def n_states(L: int, mode: str, chunk: int) -> int:
    """How many states of one sequence ``mode`` keeps: the entering state, every EVERY-th one after it and the last;
    or, chunked, the state entering each chunk of ``chunk`` steps."""
    return -(-L // EVERY[mode]) + 1 if mode in EVERY else -(-L // chunk)  # ceiling divisions, in integers


@triton.jit
def kernel_n_states(L, CHUNK: tl.constexpr, STORE_ALL: tl.constexpr, EVERY: tl.constexpr):
    """``n_states`` inside a kernel, from the mode's compile-time arguments (``constexprs``)."""
    return tl.cdiv(L, EVERY) + 1 if STORE_ALL else tl.cdiv(L, CHUNK)


def constexprs(mode: str, chunk: int) -> dict:
    """A mode's compile-time arguments for the kernels: ``CHUNK``, ``STORE_ALL`` (all and half walk the sequence as
    one span) and ``EVERY`` (steps between stored states in that span; unread when chunked)."""
    return dict(CHUNK=chunk, STORE_ALL=mode != "chunked", EVERY=EVERY.get(mode, 1))


STATE_DTYPES = (torch.float32, torch.bfloat16)  # float16's range could not hold every state


def check_states_dtype(dtype: torch.dtype) -> None:
    """ValueError unless ``dtype`` is one of ``STATE_DTYPES``."""
    if dtype not in STATE_DTYPES:
        raise ValueError(f"launch.states_dtype={dtype} is not valid: expected one of "
                         f"{', '.join(map(str, STATE_DTYPES))}")


@triton.jit
def keep_state(ptr, state, mask):
    """Store a float32 state tile at ``ptr`` in the stored states' dtype."""
    tl.store(ptr, state.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def kept_state(ptr, mask):
    """A stored state tile, in float32."""
    return tl.load(ptr, mask=mask, other=0.0).to(tl.float32)


def states_mode(states: str, L: int, sequence_state_bytes: int, budget: int, chunk: int, preferred: str) -> str:
    """The mode a call runs: ``states`` itself unless "auto", which takes ``preferred`` ("all" or "half") where its
    states fit ``budget`` bytes (``sequence_state_bytes``: one state of every sequence the call walks), else
    chunked."""
    if states != "auto":
        return states
    return preferred if n_states(L, preferred, chunk) * sequence_state_bytes <= budget else "chunked"
