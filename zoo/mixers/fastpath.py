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


@functools.cache
def _module(name: str, purpose: str):
    from zoo.optional import optional_import

    return optional_import(name, purpose)


def fast_module(name: str, purpose: str, x: torch.Tensor):
    """The module ``name`` if ``x`` lives on a GPU and ``name`` imports, else None (the reference path).

    ``purpose`` completes the single log line printed when the import fails, e.g.
    "rwkv7 on GPU (falls back to the PyTorch recurrence)".
    """
    if not x.is_cuda:
        return None
    return _module(name, purpose)
