"""Linear layer (``F.linear``) with a deterministic Triton bias gradient and float32 weight gradients.

Why: PyTorch computes a projection's bias gradient as a sum of the output gradient over all B * L rows, and on
the tall, narrow gradients of small models (65536 x 384 bf16 at MQAR's figure-2 cell) its reduction ran at a
sixth of an H100's memory speed. ``fused.py`` keeps ``F.linear``'s matmul gradients and sums the bias gradient
in one Triton kernel (``column_sum``), in a fixed order, in float32. Under 16-bit autocast on a GPU the weight
gradient comes out of its matmul in the float32 weight's dtype (``grads.py``), where autocast rounds it to bf16
and casts it back in a kernel of its own. The forward of tall, narrow 16-bit inputs on a GPU (K at most 128) is
a streaming Triton matmul (``streaming.py``, chosen by ``forward.project``; cuBLAS ran such projections at half
the memory's speed), anything else ``F.linear``'s.

``linear(x, weight, bias, backend="auto")``: ``"triton"`` (``fused.py``), ``"naive"`` (``naive.py``:
``F.linear``) or ``"auto"`` (Triton for CUDA tensors, else the reference). ``bias`` may be None.
``zoo.kernels.backend.last_backend("linear")`` says which ran.

``head_parts(x, weight, bias, parts, heads, rows=None, backend="auto")``: the projection x [B, L, K] -> [B, L, N]
read as ``parts`` views [B, L, heads, Dh] of its [B, L, parts, heads, Dh] output (attention's q, k, v; with ``rows``
[B, K'] the first part at those rows alone, as the model's last block wants its queries): ``"triton"``
(``packed.py``: the parts' gradients packed and bias-summed in one Triton pass), ``"naive"`` (``naive.py``:
``F.linear``, viewed and unbound) or ``"auto"``. ``last_backend("head_parts")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, named_or_gpu, record
from zoo.kernels.linear.naive import head_parts_naive, linear_naive

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


def head_parts(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, parts: int, heads: int,
               rows: torch.Tensor | None = None, backend: str = "auto") -> tuple[torch.Tensor, ...]:
    """x [B, L, K] @ weight [N, K]^T + bias [N] (or None), N = parts * heads * Dh -> ``parts`` tensors [B, L, heads,
    Dh], views of the [B, L, parts, heads, Dh] output; values and dtypes as ``F.linear``'s (autocast too). With
    ``rows`` [B, K'] (int64, distinct in each sequence, each in [0, L)) the first part is [B, K', heads, Dh], its rows
    there (``rows_at``)."""
    check_backend(backend, BACKENDS)
    if x.dim() != 3 or weight.dim() != 2 or weight.shape[1] != x.shape[2]:
        raise ValueError(f"head_parts: x {tuple(x.shape)} and weight {tuple(weight.shape)} are not valid: expected "
                         "x [B, L, K] and weight [N, K]")
    N = weight.shape[0]
    if parts < 1 or heads < 1 or N % (parts * heads):
        raise ValueError(f"head_parts: the weight's {N} rows do not split into {parts} parts of {heads} heads")
    if bias is not None and bias.shape != (N,):
        raise ValueError(f"head_parts: bias {tuple(bias.shape)} is not valid: expected [{N}]")
    if rows is not None and (rows.dim() != 2 or rows.shape[0] != x.shape[0] or rows.dtype != torch.int64):
        raise ValueError(f"head_parts: rows {tuple(rows.shape)} {rows.dtype} are not valid: expected [{x.shape[0]}, K] "
                         "int64")
    if not named_or_gpu(backend, "triton", x):
        record("head_parts", NAIVE)
        return head_parts_naive(x, weight, bias, parts, heads, rows)
    from zoo.kernels.linear.packed import head_parts_triton
    record("head_parts", "triton")
    return head_parts_triton(x, weight, bias, parts, heads, rows)


class Linear(torch.nn.Linear):
    """``nn.Linear`` (same parameters and state dict, still an ``nn.Linear``) that uses :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


__all__ = ["linear", "head_parts", "Linear", "BACKENDS"]
