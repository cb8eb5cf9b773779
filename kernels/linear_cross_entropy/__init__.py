"""The tied head and the training loss in one op: mean cross-entropy of ``x @ weight^T`` over the labelled rows.

``linear_cross_entropy(x, weight, targets, ignore_index=-100, backend="auto")`` with x [R, D] (the hidden states
at the labelled positions), weight [V, D] (the tied embedding) and targets [R] (``ignore_index`` where a row has
no label) -> a float32 0-d tensor: ``cross_entropy(F.linear(x, weight), targets)``, the mean over the labelled rows
(NaN when there are none). ``backend``: ``"triton"`` (``fused.py``: cuBLAS's logits, then one Triton kernel that
writes the loss and, when a gradient is wanted, the logits' gradient over the logits), ``"naive"`` (``naive.py``:
``F.linear`` and PyTorch's cross-entropy in float32) or ``"auto"`` (Triton for float CUDA inputs, else the
reference). ``zoo.kernels.backend.last_backend("linear_cross_entropy")`` says which ran. Under autocast the
matmul runs in autocast's dtype, as ``F.linear``'s would; the loss's math is float32 on either path.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, named_or_gpu, record
from zoo.kernels.cross_entropy import TRITON_DTYPES
from zoo.kernels.linear_cross_entropy.naive import linear_cross_entropy_naive

BACKENDS = ("auto", "triton", NAIVE)


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100,
                         backend: str = "auto") -> torch.Tensor:
    """Mean cross-entropy of the logits x [R, D] @ weight [V, D]^T over the rows whose target [R] is not
    ``ignore_index``."""
    check_backend(backend, BACKENDS)
    if x.dim() != 2 or weight.dim() != 2 or weight.shape[1] != x.shape[1] or targets.shape != x.shape[:1]:
        raise ValueError(f"expected x [R, D], weight [V, D] and targets [R], got {tuple(x.shape)}, "
                         f"{tuple(weight.shape)} and {tuple(targets.shape)}")
    fits = x.dtype in TRITON_DTYPES and weight.dtype in TRITON_DTYPES and targets.dtype == torch.int64
    if backend == "triton" and not fits:
        raise ValueError(f"x of dtype {x.dtype}, weight of dtype {weight.dtype} and targets of dtype {targets.dtype} "
                         f"are not valid for backend='triton': expected x and weight in one of "
                         f"{', '.join(map(str, TRITON_DTYPES))} and int64 targets")
    if not (fits and named_or_gpu(backend, "triton", x)):
        record("linear_cross_entropy", NAIVE)
        return linear_cross_entropy_naive(x, weight, targets, ignore_index)
    from zoo.kernels.linear_cross_entropy.fused import linear_cross_entropy_triton
    record("linear_cross_entropy", "triton")
    return linear_cross_entropy_triton(x, weight, targets, ignore_index)


__all__ = ["linear_cross_entropy", "BACKENDS"]
