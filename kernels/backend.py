"""How every kernels entry picks its backend, and the record of which backend each op last ran.

An entry ``op(..., backend="auto")`` takes ``"naive"`` (the plain PyTorch reference in its ``naive.py``,
runs anywhere), each of its fast paths by name (``"triton"``, ``"fla"``, ``"mamba_ssm"``, ...), or
``"auto"``: the entry's fast path for CUDA tensors where it imports (and, for fla's chunk ops, works
on this GPU), else the reference. A fast path named explicitly is imported without fallback, so a missing
package raises. Each call ends in ``record(op, backend)`` (``recorded_path`` chooses a fast path and records the
choice in one call); ``last_backend(op)`` then says which backend ran,
so GPU tests can check that the fast path really did.
"""
from __future__ import annotations

import functools
import importlib
import logging

import torch

from zoo.optional import optional_import

log = logging.getLogger("zoo")

NAIVE = "naive"
CHUNKED = "chunked"  # a chunked PyTorch form of a recurrence: batched matmuls, a Python loop over chunks at most
_LAST: dict[str, str] = {}


def check_backend(backend: str, allowed: tuple[str, ...]) -> None:
    """ValueError naming the allowed values unless ``backend`` is one of them."""
    if backend not in allowed:
        raise ValueError(f"backend={backend!r} is not valid: expected one of {', '.join(allowed)}")


def named_or_gpu(backend: str, name: str, x: torch.Tensor) -> bool:
    """Whether the path ``name``, one that needs no optional package (our Triton kernel, a chunked PyTorch form),
    runs: named explicitly, or ``"auto"`` for a CUDA tensor."""
    return backend == name or (backend == "auto" and x.is_cuda)


def record(op: str, backend: str) -> None:
    """Note that ``op`` (e.g. ``"wkv4"``) just ran on ``backend``."""
    _LAST[op] = backend


def last_backend(op: str) -> str | None:
    """The backend of ``op``'s last call, or None if it has not run since :func:`clear`."""
    return _LAST.get(op)


def clear() -> None:
    """Forget every record (before a run whose backends a test checks)."""
    _LAST.clear()


# fla's chunk kernels are wrong on Hopper GPUs with Triton >= 3.4 and < 3.7.1 (fla issue #640; fla itself
# refuses chunk_gated_delta_rule's backward there). Measured on an H100 with Triton 3.6 and fla 0.6.0:
# chunk_retention's backward hit an illegal memory access, chunk_gla did not finish a test in 200 s, and
# chunk_delta_rule was off by 35% (relative, beta up to 2) or hit an illegal memory access. chunk_rwkv7
# (the same chunked gated form) did not finish a step bench in minutes, and two GPU tests did not finish in
# two runs of the suite, one of them most likely rwkv7's (not confirmed): it is left out too. On an H200 (Triton
# 3.6, fla 0.6.0) chunk_rwkv7, with and without its safe gate, and chunk_gla did not finish one forward and
# backward at B=4, T=256, H=2, K=64 within 90 s each, where zoo's Triton chunked RWKV-7 took 8 s, compile included.
FLA_CHUNK_MODULES_BROKEN_ON_HOPPER = ("fla.ops.gla", "fla.ops.retention", "fla.ops.gated_delta_rule",
                                      "fla.ops.delta_rule", "fla.ops.rwkv7")


@functools.cache
def fla_chunks_unreliable(device_index: int) -> str | None:
    """Why fla's chunk ops cannot be trusted on this GPU, or None when they can."""
    import triton

    version = tuple(int(p) for p in triton.__version__.split("+")[0].split(".")[:3])
    if torch.cuda.get_device_capability(device_index)[0] == 9 and (3, 4, 0) <= version < (3, 7, 1):
        return f"fla's chunk kernels are unreliable on Hopper GPUs with Triton {triton.__version__} (fla #640)"
    return None


@functools.cache
def _say_once(name: str, reason: str, purpose: str) -> None:
    log.warning("zoo: %s not used: %s; %s", name, reason, purpose)


def fast_module(name: str, purpose: str, x: torch.Tensor):
    """``"auto"``'s choice: the module ``name`` if ``x`` lives on a GPU and ``name`` imports (and, for fla's
    chunk ops, works on this GPU), else None (the reference path), as an :class:`Opaque` module.

    ``purpose`` completes the single log line printed when the fast path is not used, e.g.
    "rwkv7 on GPU (falls back to the PyTorch recurrence)".
    """
    if not x.is_cuda:
        return None
    if name in FLA_CHUNK_MODULES_BROKEN_ON_HOPPER:
        reason = fla_chunks_unreliable(x.device.index or 0)
        if reason:
            _say_once(name, reason, purpose)
            return None
    module = optional_import(name, purpose)
    return None if module is None else Opaque(module)


def not_compiled(fn):
    """``torch.compiler.disable(fn)`` (``torch.compile`` calls fn as it is instead of tracing it), except that
    ``torch._dynamo`` is imported at fn's first call, not when the module defining fn is: on an H100 machine that
    import took 4.6 s of the 8.1 s that importing zoo's mixers took, which importing zoo (and a sweep's ``--count``,
    ``--dry-run`` and ``--list``) no longer pays. PyTorch's own lazy form (``torch._disable_dynamo``, which its
    optimizers' methods use) does this; where a PyTorch lacks it, the plain decorator."""
    lazy = getattr(torch, "_disable_dynamo", None)
    return torch.compiler.disable(fn) if lazy is None else lazy(fn)


class Opaque:
    """A fast-path module whose functions ``torch.compile`` calls as they are instead of tracing them: Inductor
    cannot fuse anything into a hand-written kernel, and compiling a model around some of them failed (fla's
    ``parallel_based`` and GatedFWA's kernels on an H100, torch 2.11, Triton 3.6: InductorError)."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name: str):
        attr = getattr(self._module, name)
        return torch.compiler.disable(attr) if callable(attr) else attr


FLA_RECURRENT = "fla_recurrent"


def fla_path(backend: str, module: str, x: torch.Tensor, purpose: str) -> tuple[Opaque | None, str]:
    """(module, backend name) for an fla op that has both chunk kernels (``"fla"``) and fused recurrent kernels
    with a backward (``"fla_recurrent"``: one Triton program per batch and head steps through time; slower
    than chunks on long sequences, and not the kernels fla #640 breaks), or ``(None, "naive")``.

    ``backend`` ``"fla"`` or ``"fla_recurrent"`` imports ``module`` (raising if it cannot). ``"auto"`` on a GPU
    where fla imports takes the chunk kernels, or the fused recurrent ones where the chunks are unreliable
    (:func:`fla_chunks_unreliable`); elsewhere the reference.
    """
    if backend in ("fla", FLA_RECURRENT):
        return Opaque(importlib.import_module(module)), backend
    if backend != "auto" or not x.is_cuda:
        return None, NAIVE
    found = optional_import(module, purpose)
    if found is None:
        return None, NAIVE
    reason = fla_chunks_unreliable(x.device.index or 0)
    if reason:
        _say_once(f"{module}'s chunk kernels", reason, "its fused recurrent kernels run instead")
        return Opaque(found), FLA_RECURRENT
    return Opaque(found), "fla"


def without_autocast(fn):
    """``fn`` with autocast off on every device: a PyTorch kernel that does its own float32 math. Under training's
    bf16 autocast its matmuls would silently run in bf16, and some of its ops have no bf16 version at all
    (``torch.linalg.solve_triangular``)."""
    @functools.wraps(fn)
    def float32_math(*args, **kwargs):
        with torch.autocast("cuda", enabled=False), torch.autocast("cpu", enabled=False):
            return fn(*args, **kwargs)

    return float32_math


def fast_path(backend: str, fast: str, module: str, x: torch.Tensor, purpose: str):
    """The module of the fast path named ``fast`` for this call, or None for another backend.

    ``backend == fast`` imports ``module`` (raising if it cannot); ``"auto"`` asks :func:`fast_module`.
    """
    if backend == fast:
        return Opaque(importlib.import_module(module))
    if backend == "auto":
        return fast_module(module, purpose, x)
    return None


def recorded_path(op: str, backend: str, fast: str, module: str, x: torch.Tensor, purpose: str):
    """:func:`fast_path`, and the record that ``op`` ran on ``fast`` (its module returned) or on the reference
    (None returned)."""
    found = fast_path(backend, fast, module, x, purpose)
    record(op, NAIVE if found is None else fast)
    return found


class Compiled:
    """``fn`` through ``torch.compile`` (``fullgraph=True, dynamic=False``: one graph per input shape and dtype),
    compiled on first use for each torch.compile backend (``compiler``) asked for; ``what`` names it in the log.

    ``compiled(*args, fallback=True, compiler="inductor")`` returns ``fn(*args)`` compiled (``in_training``: only in a
    training step on a GPU); traced into a model that is compiled as a whole, ``fn(*args)`` as it is, which that
    compile fuses. With ``fallback``, a
    failure to compile is said once, in one line, and this call and every later one in the process return None (the
    caller runs ``fn`` uncompiled; if that fails too, its error is the real one). Without it, the error is raised.
    Either way only the forward's compile is caught: torch compiles the backward at its first call, inside
    ``loss.backward()``, where a failure is raised.
    """

    def __init__(self, fn, what: str):
        self.fn, self.what = fn, what
        self.failed: str | None = None  # why compiling failed, once it has in this process
        self._by_compiler: dict = {}

    def __call__(self, *args, fallback: bool = True, compiler: str = "inductor"):
        if torch.compiler.is_compiling():
            return self.fn(*args)
        if fallback and self.failed:
            return None
        if compiler not in self._by_compiler:
            self._by_compiler[compiler] = torch.compile(self.fn, fullgraph=True, dynamic=False, backend=compiler)
        try:
            return self._by_compiler[compiler](*args)
        except Exception as err:  # noqa: BLE001 - torch.compile raises many kinds; the eager form re-raises real errors
            if not fallback:
                raise
            lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [""]
            self.failed = f"{type(err).__name__}: {lines[0]}"
            log.warning("zoo: torch.compile failed for %s (%s); it runs uncompiled instead", self.what, self.failed)
            return None

    def in_training(self, *args) -> tuple:
        """``(self(*args), True)`` in a training step on a GPU (the first argument on CUDA, gradients on), else and
        where compiling failed ``(self.fn(*args), False)``: evaluation, whose batch shapes would each compile anew,
        runs forward only and costs little uncompiled."""
        if args[0].is_cuda and torch.is_grad_enabled():
            out = self(*args)
            if out is not None:
                return out, True
        return self.fn(*args), False
