"""Pick a mixer's GPU fast path: an optional package's op, used only for CUDA tensors."""
from __future__ import annotations

import functools

import torch


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
