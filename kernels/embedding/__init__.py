"""Token embedding (a row gather) with a deterministic, load-balanced weight gradient.

The weight gradient of an embedding sums the output gradient's rows of every id into that id's row. PyTorch's
CUDA backward (a radix sort, then several segment kernels) took about 0.38 ms of a 3.8 ms MQAR training step
on an H100 (65536 ids into an 8192 x 128 float32 table). ``sorted_sum.py`` sorts the ids once and sums each
row's gradient rows in two Triton passes over fixed-size pieces of the sorted list, without atomics: the result
is bit-identical from run to run, and equals PyTorch's up to rounding (another summation order). The forward is
the same gather as ``F.embedding``.

``embedding(ids, weight, backend="auto")``: ``"triton"`` (``sorted_sum.py``), ``"naive"`` ``F.embedding``
(``naive.py``), ``"auto"`` the Triton backward for CUDA tensors. ``zoo.kernels.backend.last_backend("embedding")``
says which ran.

``embedding_dropout(ids, weight, positions, p, backend="auto")``: ``dropout(weight[ids] + positions, p)`` in
training, a model's embedding dropout: ``"triton"`` (``dropout.py``: one pass each way, the mask drawn from a seed
and never stored, the weight gradient by ``sorted_sum.py``), ``"naive"`` (``F.embedding``, the add and
``F.dropout``), ``"auto"`` Triton for CUDA tensors; ``last_backend("embedding_dropout")``.

Not supported: ``padding_idx``, ``max_norm``, ``scale_grad_by_freq`` and sparse gradients (use ``F.embedding`` for
those).
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, record, recorded_path
from zoo.kernels.embedding.naive import embedding_dropout_naive, embedding_naive

BACKENDS = ("auto", "triton", NAIVE)


def embedding(ids: torch.Tensor, weight: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """Rows of weight [V, D] at integer ids [...] (each in [0, V)) -> [..., D] in weight's dtype."""
    check_backend(backend, BACKENDS)
    fast = recorded_path("embedding", backend, "triton", "zoo.kernels.embedding.sorted_sum", weight,
                         "embedding on GPU (falls back to PyTorch's backward)")
    return embedding_naive(ids, weight) if fast is None else fast.embedding(ids, weight)


def masks_by_flat_index(ids: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the dropout kernels (``dropout.kept_by_dropout``, also drawn by ``layer_norm.embedding_layer_norm``) can
    draw the mask of weight[ids]'s values from their flat indices, an int32: fewer than 2 ** 31 values."""
    return ids.numel() * weight.shape[1] < 2 ** 31


def embedding_dropout(ids: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor | None, p: float,
                      backend: str = "auto") -> torch.Tensor:
    """dropout(weight[ids] + positions, p) for ids [B, L] (each in [0, V)), weight [V, D] and positions [L, D] (or
    None) -> [B, L, D] in weight's dtype: each value dropped with probability p, the rest scaled by 1 / (1 - p)."""
    check_backend(backend, BACKENDS)
    if ids.dim() != 2 or (positions is not None and positions.shape != (ids.shape[1], weight.shape[1])):
        raise ValueError(f"embedding_dropout: ids {tuple(ids.shape)} and positions "
                         f"{None if positions is None else tuple(positions.shape)} are not valid: expected ids [B, L] "
                         f"and positions [L, D] = [{ids.shape[-1]}, {weight.shape[1]}] or None")
    if not 0 <= p < 1:
        raise ValueError(f"embedding_dropout: p={p} is not valid: expected a probability in [0, 1)")
    if not masks_by_flat_index(ids, weight):
        record("embedding_dropout", NAIVE)
        return embedding_dropout_naive(ids, weight, positions, p)
    fast = recorded_path("embedding_dropout", backend, "triton", "zoo.kernels.embedding.dropout", weight,
                         "embedding dropout on GPU")
    return embedding_dropout_naive(ids, weight, positions, p) if fast is None else fast.embedding_dropout(
        ids, weight, positions, p)


class Embedding(torch.nn.Embedding):
    """``nn.Embedding`` (same parameters and state dict, still an ``nn.Embedding``) that uses :func:`embedding`.

    Plain tables only: ``padding_idx``, ``max_norm``, ``scale_grad_by_freq`` or ``sparse`` raise ValueError."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        asked = {"padding_idx": self.padding_idx is not None, "max_norm": self.max_norm is not None,
                 "scale_grad_by_freq": self.scale_grad_by_freq, "sparse": self.sparse}
        if any(asked.values()):
            raise ValueError(f"Embedding does not support {', '.join(k for k, on in asked.items() if on)}: "
                             f"use torch.nn.Embedding")

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return embedding(ids, self.weight)


__all__ = ["embedding", "embedding_dropout", "masks_by_flat_index", "Embedding", "BACKENDS"]
