"""RWKV-7's state recurrence (see ``naive.py`` for the formula).

``rwkv7(r, w, k, v, a, b, w_min=None, backend="auto")``: ``"fla"`` (flash-linear-attention's ``chunk_rwkv7``),
``"triton_chunk"`` (``chunk.py``, our Triton chunked form, for decays bounded below by a ``w_min`` it
``fits``), ``"triton"`` (``fused_recurrent.py``, our Triton fused recurrence, any decays), ``"chunked"``
(``chunked.py``, the chunked form in batched PyTorch), ``"naive"`` (``naive.py``, the PyTorch recurrence, one step
at a time) or ``"auto"``: for CUDA tensors fla where it imports and its chunk kernels work on this GPU, else our
chunked kernels where ``w_min`` fits them, else our fused recurrence; elsewhere the recurrence.
``zoo.kernels.backend.last_backend("rwkv7")`` says which ran.

On an H200 (Triton 3.6, where fla's chunks do not run) at the figure-2 cell's shape (B=256, L=256, H=2, K=V=64,
bf16 inputs, decays in the layer's range), forward / forward + backward: the chunked kernels 0.354 / 1.130 ms, the
fused recurrence 0.511 / 2.688 (``do_bench`` in one process; ``chunk.py``).
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import CHUNKED, NAIVE, check_backend, fast_path, named_or_gpu, record, recorded_path
from zoo.kernels.rwkv7.chunked import rwkv7_chunked
from zoo.kernels.rwkv7.naive import rwkv7_naive

TRITON_CHUNK = "triton_chunk"
BACKENDS = ("auto", "fla", TRITON_CHUNK, "triton", CHUNKED, NAIVE)


def rwkv7(r: torch.Tensor, w: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
          w_min: float | None = None, backend: str = "auto") -> torch.Tensor:
    """r, w, k, a, b: (B, L, H, K), w the log decays (< 0); v: (B, L, H, V) -> o: (B, L, H, V) (in r's dtype on fla
    and triton_chunk, float32 on triton, chunked and naive).

    ``w_min``: a lower bound of every w (the caller's promise, not checked), which lets fla use its chunked form
    with a safe gate (``safe_gate=True, lower_bound=w_min``, chunks of 64) and our chunked kernels run (they need
    one that ``chunk.fits``); None runs fla's default form, and the fused recurrence in place of our chunks. The
    others need none.
    """
    check_backend(backend, BACKENDS)
    fla = fast_path(backend, "fla", "fla.ops.rwkv7", r, "rwkv7 on GPU (our Triton kernels run instead)")
    if fla is not None:
        record("rwkv7", "fla")
        safe = {} if w_min is None else dict(safe_gate=True, lower_bound=w_min, chunk_size=64)
        o, _ = fla.chunk_rwkv7(r=r, w=w.to(r.dtype), k=k, v=v, a=a, b=b, scale=1.0, **safe)
        return o
    if backend == CHUNKED:
        record("rwkv7", CHUNKED)
        return rwkv7_chunked(r, w, k, v, a, b)
    if named_or_gpu(backend, TRITON_CHUNK, r):
        from zoo.kernels.rwkv7 import chunk  # Triton: imported where it runs
        if chunk.fits(w_min):
            record("rwkv7", TRITON_CHUNK)
            return chunk.rwkv7_chunk(r, w, k, v, a, b, launch=chunk.LAUNCH)
        if backend == TRITON_CHUNK:
            raise ValueError(f"rwkv7: backend='triton_chunk' needs a w_min with {chunk.CHUNK} |w_min| <= "
                             f"{chunk.MAX_EXPONENT}, got w_min={w_min}")
    fused = recorded_path("rwkv7", backend, "triton", "zoo.kernels.rwkv7.fused_recurrent", r,
                          "rwkv7 on GPU (falls back to the PyTorch recurrence)")
    return rwkv7_naive(r, w, k, v, a, b) if fused is None else fused.rwkv7_fused(r, w, k, v, a, b)


__all__ = ["rwkv7", "BACKENDS"]
