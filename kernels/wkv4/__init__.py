"""RWKV-4's WKV operator: a per-channel, exponentially decayed, normalized running average of values.

``wkv4(w, u, k, v, backend="auto")``: ``"triton"`` (``fused_recurrent.py``, forward and backward
kernels), ``"naive"`` (``naive.py``, the PyTorch recurrence) or ``"auto"`` (Triton for CUDA tensors where
it imports, else the recurrence). ``zoo.kernels.backend.last_backend("wkv4")`` says which ran. Both compute in
float32 and give k's and v's gradients in their dtypes; the Triton kernels read a bf16 k and v (autocast's
projections) as they are, without float32 copies.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, recorded_path
from zoo.kernels.wkv4.naive import wkv4_naive

BACKENDS = ("auto", "triton", NAIVE)


def wkv4(w: torch.Tensor, u: torch.Tensor, k: torch.Tensor, v: torch.Tensor, r: torch.Tensor | None = None,
         out_dtype: torch.dtype | None = None, backend: str = "auto") -> torch.Tensor:
    """w, u: (C,) decay rates and bonus; k, v: (B, L, C) -> y: (B, L, C) float32 (float64 stays on naive). With the
    receptance r (B, L, C), RWKV's gated output ``sigmoid(r) * y`` instead (the Triton kernels apply the gate on
    the fly). ``out_dtype``: the output's dtype (None: y's)."""
    check_backend(backend, BACKENDS)
    if r is not None and r.shape != k.shape:
        raise ValueError(f"r.shape={tuple(r.shape)} is not valid: expected k's shape {tuple(k.shape)} (B, L, C)")
    fused = recorded_path("wkv4", backend, "triton", "zoo.kernels.wkv4.fused_recurrent", k,
                          "wkv4 on GPU (falls back to the PyTorch recurrence)")
    if fused is not None:
        return fused.wkv4(w, u, k, v, r, out_dtype or torch.float32)
    y = wkv4_naive(w, u, k, v)
    if r is not None:
        y = torch.sigmoid(r.to(y.dtype)) * y
    return y.to(out_dtype or y.dtype)


__all__ = ["wkv4", "BACKENDS"]
