"""Linear layer (``F.linear``) with a deterministic Triton bias gradient and float32 weight gradients.

Why: PyTorch computes a projection's bias gradient as a sum of the output gradient over all B * L rows, and on
the tall, narrow gradients of small models (65536 x 384 bf16 at MQAR's figure-2 cell) its reduction ran at a
sixth of an H100's memory speed. ``fused.py`` keeps ``F.linear``'s forward and matmul gradients and sums the
bias gradient in one Triton kernel (``column_sum``), in a fixed order, in float32. Under 16-bit autocast on a
GPU the weight gradient comes out of its matmul in the float32 weight's dtype (``grads.py``), where autocast
rounds it to bf16 and casts it back in a kernel of its own.

``linear(x, weight, bias, backend="auto")``: ``"triton"`` (``fused.py``), ``"naive"`` (``naive.py``:
``F.linear``) or ``"auto"`` (Triton for CUDA tensors, else the reference). ``bias`` may be None.
``zoo.kernels.backend.last_backend("linear")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, named_or_gpu, record
from zoo.kernels.linear.naive import linear_naive

BACKENDS = ("auto", "triton", NAIVE)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
           backend: str = "auto") -> torch.Tensor:
    """x [..., K] @ weight [N, K]^T + bias [N] (or None) -> [..., N], dtypes as ``F.linear``'s (autocast too; the
    Triton path's float32 weight gradient is not rounded to 16 bits first)."""
    check_backend(backend, BACKENDS)
    if not named_or_gpu(backend, "triton", x):
        record("linear", NAIVE)
        return linear_naive(x, weight, bias)
    from zoo.kernels.linear.fused import linear_triton
    record("linear", "triton")
    return linear_triton(x, weight, bias)


class Linear(torch.nn.Linear):
    """``nn.Linear`` (same parameters and state dict, still an ``nn.Linear``) that uses :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


__all__ = ["linear", "Linear", "BACKENDS"]
