"""Pick a mixer's GPU fast path (an optional package's op, used only for CUDA tensors) and record which
backend each op last ran, so GPU tests can check that the fast path really ran.

Every dispatching op calls ``record(op, backend)``; ``LAST_BACKEND[op]`` is then the backend of the last
call: ``"reference"`` for the plain PyTorch path, else the name of the fast path. Clear it before a run
whose path you want to check.
"""
from __future__ import annotations

import functools

import torch

REFERENCE = "reference"
LAST_BACKEND: dict[str, str] = {}


def record(op: str, backend: str) -> None:
    """Note that ``op`` (e.g. ``"rwkv.wkv"``) just ran on ``backend``."""
    LAST_BACKEND[op] = backend


class _Opaque:
    """A fast-path module whose functions ``torch.compile`` calls as they are instead of tracing them: Inductor
    cannot fuse anything into a hand-written kernel, and compiling a model around some of them failed (fla's
    ``parallel_based`` and GatedFWA's kernels on an H100, torch 2.11, Triton 3.6: InductorError)."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name: str):
        attr = getattr(self._module, name)
        return torch.compiler.disable(attr) if callable(attr) else attr


@functools.cache
def _module(name: str, purpose: str):
    from zoo.optional import optional_import

    module = optional_import(name, purpose)
    return None if module is None else _Opaque(module)


# fla's chunk kernels are wrong on Hopper GPUs with Triton >= 3.4 and < 3.7.1 (fla issue #640; fla itself
# refuses chunk_gated_delta_rule's backward there). Measured on an H100 with Triton 3.6 and fla 0.6.0:
# chunk_retention's backward hit an illegal memory access, chunk_gla did not finish a test in 200 s, and
# chunk_delta_rule was off by 35% (relative, beta up to 2) or hit an illegal memory access.
FLA_CHUNK_MODULES_BROKEN_ON_HOPPER = ("fla.ops.gla", "fla.ops.retention", "fla.ops.gated_delta_rule",
                                      "fla.ops.delta_rule")


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
    from zoo.optional import log

    log.warning("zoo: %s not used: %s; %s", name, reason, purpose)


def fast_module(name: str, purpose: str, x: torch.Tensor):
    """The module ``name`` if ``x`` lives on a GPU and ``name`` imports (and, for fla's chunk ops,
    works on this GPU), else None (the reference path).

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
    return _module(name, purpose)
