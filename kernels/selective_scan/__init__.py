"""Mamba-1's selective scan: a diagonal, input-dependent linear recurrence per channel and state.

``selective_scan(u, dt, A, B, C, backend="auto")``: ``"mamba_ssm"`` (mamba-ssm's fused CUDA
``selective_scan_fn``), ``"triton"`` (``fused_recurrent.py``), ``"naive"`` (``naive.py``, the PyTorch
recurrence), or ``"auto"``: for CUDA tensors mamba-ssm where it imports, else our Triton scan, else the
recurrence. ``zoo.kernels.backend.last_backend("selective_scan")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, fast_path, record
from zoo.kernels.selective_scan.naive import selective_scan_naive

BACKENDS = ("auto", "mamba_ssm", "triton", NAIVE)


def selective_scan(u: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                   backend: str = "auto") -> torch.Tensor:
    """u, dt: (Bt, L, D); A: (D, N); B, C: (Bt, L, N) -> y: (Bt, L, D) float32 (N a power of two for Triton)."""
    check_backend(backend, BACKENDS)
    ssm = fast_path(backend, "mamba_ssm", "mamba_ssm.ops.selective_scan_interface", u,
                    "selective_scan's fused CUDA scan (uses our Triton scan)")
    if ssm is not None:
        record("selective_scan", "mamba_ssm")
        y = ssm.selective_scan_fn(u.transpose(1, 2).contiguous(), dt.transpose(1, 2).contiguous(), A.float(),
                                  B.transpose(1, 2).contiguous(), C.transpose(1, 2).contiguous())
        return y.transpose(1, 2)
    fused = fast_path(backend, "triton", "zoo.kernels.selective_scan.fused_recurrent", u,
                      "selective_scan on GPU (falls back to the PyTorch recurrence)")
    record("selective_scan", NAIVE if fused is None else "triton")
    return selective_scan_naive(u, dt, A, B, C) if fused is None else fused.selective_scan(u, dt, A, B, C)


__all__ = ["selective_scan", "BACKENDS"]
