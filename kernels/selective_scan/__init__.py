"""Mamba-1's selective scan: a diagonal, input-dependent linear recurrence per channel and state.

``selective_scan(u, dt, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, backend="auto",
out_dtype=None)``, with
mamba-ssm's ``selective_scan_fn`` options (dt bias and softplus, D skip, silu(z) gate) fused into the scan:
``"mamba_ssm"`` (mamba-ssm's fused CUDA ``selective_scan_fn``), ``"triton"`` (``fused_recurrent.py``),
``"naive"`` (``naive.py``, the PyTorch recurrence), or ``"auto"``: for CUDA tensors mamba-ssm where it imports,
else our Triton scan, else the recurrence. ``zoo.kernels.backend.last_backend("selective_scan")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, fast_path, record, recorded_path
from zoo.kernels.selective_scan.naive import selective_scan_naive

BACKENDS = ("auto", "mamba_ssm", "triton", NAIVE)


def selective_scan(u: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                   D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                   delta_bias: torch.Tensor | None = None, delta_softplus: bool = False,
                   backend: str = "auto", out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """u, dt, z: (Bt, L, E); A: (E, N); B, C: (Bt, L, N); D, delta_bias: (E,) -> y: (Bt, L, E) in ``out_dtype``
    (None: float32; mamba-ssm: u's dtype), N a power of two for Triton. y = (scan(u, dt') + D u) * silu(z), dt' =
    softplus(dt + delta_bias) (each term optional, as in ``naive.py``). Our Triton scan stores y in ``out_dtype``
    directly; the others cast it."""
    check_backend(backend, BACKENDS)
    ssm = fast_path(backend, "mamba_ssm", "mamba_ssm.ops.selective_scan_interface", u,
                    "selective_scan's fused CUDA scan (uses our Triton scan)")
    if ssm is not None:
        record("selective_scan", "mamba_ssm")
        # mamba-ssm is channel-first (Bt, E, L); selective_scan_fn copies only what is not unit-stride along L
        y = ssm.selective_scan_fn(u.transpose(1, 2), dt.transpose(1, 2), A.float(), B.transpose(1, 2),
                                  C.transpose(1, 2), None if D is None else D.float(),
                                  None if z is None else z.transpose(1, 2),
                                  None if delta_bias is None else delta_bias.float(), delta_softplus)
        return y.transpose(1, 2).to(out_dtype or y.dtype)
    fused = recorded_path("selective_scan", backend, "triton", "zoo.kernels.selective_scan.fused_recurrent", u,
                          "selective_scan on GPU (falls back to the PyTorch recurrence)")
    if fused is None:
        y = selective_scan_naive(u, dt, A, B, C, D, z, delta_bias, delta_softplus)
        return y.to(out_dtype or y.dtype)
    return fused.selective_scan(u, dt, A, B, C, D, z, delta_bias, delta_softplus,
                                out_dtype=out_dtype or torch.float32)


__all__ = ["selective_scan", "BACKENDS"]
