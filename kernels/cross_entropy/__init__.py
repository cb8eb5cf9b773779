"""Mean cross-entropy over the labelled rows of the logits: the training loss of every zoo run.

``cross_entropy(logits, targets, ignore_index=-100, backend="auto")`` with logits [R, V] and targets [R]
(``ignore_index`` where a row has no label) -> a float32 0-d tensor, the mean over the labelled rows (NaN when
there are none), computed in float32 whatever the logits' dtype. ``backend``: ``"triton"`` (``fused.py``: a
log-sum-exp pass over the logits forward, one gradient pass backward, the gradient written in the logits'
dtype), ``"naive"`` (``naive.py``: ``F.cross_entropy`` of the logits cast to float32) or ``"auto"`` (Triton for
float CUDA logits, else the reference). ``zoo.kernels.backend.last_backend("cross_entropy")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, named_or_gpu, record
from zoo.kernels.cross_entropy.naive import cross_entropy_naive

BACKENDS = ("auto", "triton", NAIVE)
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100,
                  backend: str = "auto") -> torch.Tensor:
    """Mean cross-entropy of logits [R, V] over the rows whose target [R] is not ``ignore_index``."""
    check_backend(backend, BACKENDS)
    if logits.dim() != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"expected logits [R, V] and targets [R], got {tuple(logits.shape)} and {tuple(targets.shape)}")
    fits = logits.dtype in TRITON_DTYPES and targets.dtype == torch.int64
    if backend == "triton" and not fits:
        raise ValueError(f"logits of dtype {logits.dtype} and targets of dtype {targets.dtype} are not valid for "
                         f"backend='triton': expected logits in one of {', '.join(map(str, TRITON_DTYPES))} and "
                         "int64 targets")
    if not (fits and named_or_gpu(backend, "triton", logits)):
        record("cross_entropy", NAIVE)
        return cross_entropy_naive(logits, targets, ignore_index)
    from zoo.kernels.cross_entropy.fused import cross_entropy_triton
    record("cross_entropy", "triton")
    return cross_entropy_triton(logits, targets, ignore_index)
