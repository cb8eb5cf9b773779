"""RWKV-7's state recurrence (see ``naive.py`` for the formula).

``rwkv7(r, w, k, v, a, b, w_min=None, backend="auto")``: ``"fla"`` (flash-linear-attention's
``chunk_rwkv7``), ``"chunked"`` (``chunked.py``, the same recurrence by chunks in batched PyTorch),
``"naive"`` (``naive.py``, the PyTorch recurrence, one step at a time) or ``"auto"`` (fla for CUDA tensors
where it imports and its chunk kernels work on this GPU, else chunked on CUDA, else the recurrence).
``zoo.kernels.backend.last_backend("rwkv7")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import CHUNKED, NAIVE, check_backend, fast_path, named_or_gpu, record
from zoo.kernels.rwkv7.chunked import rwkv7_chunked
from zoo.kernels.rwkv7.naive import rwkv7_naive

BACKENDS = ("auto", "fla", CHUNKED, NAIVE)


def rwkv7(r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
          w_min: float | None = None, backend: str = "auto") -> torch.Tensor:
    """r, w, k, a, b: (B, L, H, K), w the log decays (< 0); v: (B, L, H, V) -> o: (B, L, H, V) (float32 on
    chunked and naive).

    ``w_min``: a lower bound of every w, which lets fla use its chunked form with a safe gate
    (``safe_gate=True, lower_bound=w_min``, chunks of 64); None runs fla's default form. chunked needs none.
    """
    check_backend(backend, BACKENDS)
    fla = fast_path(backend, "fla", "fla.ops.rwkv7", r, "rwkv7 on GPU (the chunked PyTorch form runs instead)")
    if fla is None:
        # on a GPU the step-by-step recurrence is one small kernel chain per step: far slower than chunks
        name = CHUNKED if named_or_gpu(backend, CHUNKED, r) else NAIVE
        record("rwkv7", name)
        return (rwkv7_chunked if name == CHUNKED else rwkv7_naive)(r, w, k, v, a, b)
    record("rwkv7", "fla")
    safe = {} if w_min is None else dict(safe_gate=True, lower_bound=w_min, chunk_size=64)
    o, _ = fla.chunk_rwkv7(r=r, w=w.to(r.dtype), k=k, v=v, a=a, b=b, scale=1.0, **safe)
    return o


__all__ = ["rwkv7", "BACKENDS"]
