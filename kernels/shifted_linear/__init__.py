"""Projections of token-shifted inputs: ``F.linear(x + (x_prev - x) * mixes[g_i], W_i)`` for several weights W_i,
each reading one of G token-shift mixes (RWKV-7's r, k, v and LoRA inputs), side by side in one output.

x_prev[:, t] = x[:, t - 1], zeros at t = 0, as in ``zoo.kernels.token_shift``.

``shifted_linear(x, mixes, weights, mix_of, backend="auto")``: ``"folded"`` (``folded.py``: the mixes folded into
the weights, one matmul of [x, x_prev] for every projection), ``"naive"`` (``naive.py``: each mix made, then one
matmul per weight) or ``"auto"`` (folded for CUDA tensors, else the reference). Under autocast the matmuls run in
its dtype, as ``F.linear``'s. ``zoo.kernels.backend.last_backend("shifted_linear")`` says which ran.

Shapes: x [B, T, D]; mixes [G, D]; weights[i] [N_i, D]; ``mix_of[i]`` in [0, G) -> [B, T, N], N = sum N_i, weight
i's part in columns sum N_<i to sum N_<=i.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, named_or_gpu, record
from zoo.kernels.shifted_linear.folded import shifted_linear_folded
from zoo.kernels.shifted_linear.naive import shifted_linear_naive

BACKENDS = ("auto", "folded", NAIVE)


def shifted_linear(x: torch.Tensor, mixes: torch.Tensor, weights: list[torch.Tensor], mix_of: tuple[int, ...],
                   backend: str = "auto") -> torch.Tensor:
    """x [B, T, D]; mixes [G, D]; weights[i] [N_i, D] reading mix ``mix_of[i]`` -> [B, T, N]: the parts
    ``F.linear(x + (x_prev - x) * mixes[mix_of[i]], weights[i])`` side by side."""
    check_backend(backend, BACKENDS)
    G = mixes.shape[0] if mixes.dim() == 2 else 0
    if (x.dim() != 3 or mixes.dim() != 2 or mixes.shape[1] != x.shape[2] or not weights
            or len(mix_of) != len(weights) or any(w.dim() != 2 or w.shape[1] != x.shape[2] for w in weights)
            or any(not 0 <= g < G for g in mix_of)):
        raise ValueError(f"shifted_linear: x {tuple(x.shape)}, mixes {tuple(mixes.shape)}, weights "
                         f"{[tuple(w.shape) for w in weights]} and mix_of {tuple(mix_of)} are not valid: expected "
                         "x [B, T, D], mixes [G, D], at least one weight, each [N_i, D], and one mix index in "
                         "[0, G) per weight")
    if named_or_gpu(backend, "folded", x):
        record("shifted_linear", "folded")
        return shifted_linear_folded(x, mixes, weights, mix_of)
    record("shifted_linear", NAIVE)
    return shifted_linear_naive(x, mixes, weights, mix_of)


__all__ = ["shifted_linear", "BACKENDS"]
