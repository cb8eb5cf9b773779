"""Hyena's implicit long filter: positional features z -> a sin-activated MLP -> an exponential decay window.

``implicit_filter(z, weights, biases, freq, w_out, t, deltas, backend="auto")`` -> h [L, D], the taps of one causal
filter per channel (``zoo.mixers.hyena.ImplicitFilter`` holds the parameters). ``"triton"`` (``fused.py``: one
autograd Function, cuBLAS matmuls and one Triton kernel per layer each way, float32 inside), ``"naive"``
(``naive.py``: the PyTorch composition, each op its own kernel, autocast's dtype for the matmuls) or ``"auto"``
(Triton for CUDA tensors). ``zoo.kernels.backend.last_backend("implicit_filter")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, recorded_path
from zoo.kernels.implicit_filter.naive import implicit_filter_naive

BACKENDS = ("auto", "triton", NAIVE)


def implicit_filter(z: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor], freq: torch.Tensor,
                    w_out: torch.Tensor, t: torch.Tensor, deltas: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """z [L, E]; weights[k] [F, E] (k = 0) or [F, F]; biases[k] [F]; freq [F]; w_out [D, F]; t [L, 1]; deltas [D]
    -> h [L, D] = ``(x_K @ w_out^T) * exp(-t * deltas)``, x_0 = z, ``x_{k+1} = sin(freq * (x_k @ weights[k]^T +
    biases[k]))``."""
    check_backend(backend, BACKENDS)
    if len(weights) != len(biases) or not weights:
        raise ValueError(f"implicit_filter: {len(weights)} weights and {len(biases)} biases: expected one bias per "
                         "weight, at least one layer")
    fast = recorded_path("implicit_filter", backend, "triton", "zoo.kernels.implicit_filter.fused", z,
                         "Hyena's implicit filter on GPU (falls back to the PyTorch composition)")
    run = implicit_filter_naive if fast is None else fast.implicit_filter
    return run(z, weights, biases, freq, w_out, t, deltas)


__all__ = ["implicit_filter", "BACKENDS"]
