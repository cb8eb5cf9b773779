"""Depthwise causal short convolution over time (Hyena, Mamba, Mamba-2, BASED, DeltaNet), with an optional fused silu.

y[b, t, c] = act(bias[c] + sum_{j<K} weight[c, j] x[b, t - K + 1 + j, c]), x = 0 before t = 0: exactly
``nn.Conv1d(C, C, K, groups=C, padding=K - 1)`` on the channel-first layout, cut to the first T outputs. Done that
way, every training step transposes the input to [B, C, T] and back, pads, slices, and runs cuDNN's depthwise conv
forward and backward. ``walk.py`` works on the [B, T, C] layout as it lies: one Triton kernel for the forward, one
for the backward, each program walking a span of times with the filter's rows in registers, float32 sums,
deterministic filter and bias gradients (no atomics), capturable in a CUDA graph. ``activation="silu"`` fuses the
silu that Mamba, Mamba-2 and DeltaNet apply right after their conv (the backward recomputes the pre-activation
instead of saving it). On an H100 80GB, bf16, timed in a CUDA graph (``python -m zoo.kernels.bench
--short-conv``), the kernels before the walk took, forward / forward + backward: 0.037 / 0.128 ms against the
grouped conv1d's 0.425 / 1.195 at B=256, T=256, C=384, K=3 (Hyena's), and with silu 0.032 / 0.145 against 0.348 /
1.040 at B=256, T=256, C=256, K=4 (Mamba's); the walk's backward takes 30 to 56% less than theirs on an H200
(``walk.py``).

``short_conv(x, weight, bias=None, activation=None, backend="auto")``: ``"triton"`` (``walk.py``), ``"naive"``
(``naive.py``, ``F.conv1d`` with the transposes), ``"auto"`` Triton for CUDA tensors.
``zoo.kernels.backend.last_backend("short_conv")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, recorded_path
from zoo.kernels.short_conv.naive import short_conv_naive

BACKENDS = ("auto", "triton", NAIVE)
ACTIVATIONS = (None, "silu")


def check_activation(activation: str | None) -> None:
    """ValueError unless ``activation`` is one of :data:`ACTIVATIONS`."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not valid: expected None or 'silu'")


def short_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               activation: str | None = None, backend: str = "auto") -> torch.Tensor:
    """x [B, T, C]; weight [C, K] (an ``nn.Conv1d``'s [C, 1, K] weight at ``[:, 0]``); bias [C] or None;
    activation None or ``"silu"`` -> [B, T, C] in x's dtype."""
    check_backend(backend, BACKENDS)
    check_activation(activation)
    fast = recorded_path("short_conv", backend, "triton", "zoo.kernels.short_conv.walk", x,
                         "short_conv on GPU (falls back to F.conv1d)")
    run = short_conv_naive if fast is None else fast.short_conv
    return run(x, weight, bias, activation)


__all__ = ["short_conv", "check_activation", "BACKENDS", "ACTIVATIONS"]
