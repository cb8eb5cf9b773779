"""LayerNorm with a faster weight/bias gradient for the tall, narrow inputs of small models.

For x of shape [..., D] with many rows and a small D (e.g. 65536 x 128 in the MQAR grid), PyTorch's
fused LayerNorm backward spends most of its time in the kernel that reduces the weight and bias
gradients over rows (measured on an H100: about 0.26 ms per call, more than the attention backward).
Here the input gradient still comes from PyTorch's kernel, and the weight and bias gradients are two
plain column sums, which PyTorch's reduction kernels do at memory speed. Values are those of
``F.layer_norm`` (the same forward kernel); gradients agree to rounding.

``layer_norm(x, weight, bias, eps, backend="auto")``: ``"split"`` uses the split backward (``split.py``),
``"naive"`` ``F.layer_norm`` (``naive.py``), ``"auto"`` the split backward on CUDA tensors.
``zoo.kernels.backend.last_backend("layer_norm")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, named_or_gpu, record
from zoo.kernels.layer_norm.naive import layer_norm_naive
from zoo.kernels.layer_norm.split import SplitBackwardLayerNorm

BACKENDS = ("auto", "split", NAIVE)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
               backend: str = "auto") -> torch.Tensor:
    """LayerNorm over the last dim of x [..., D] with weight, bias [D]."""
    check_backend(backend, BACKENDS)
    if not named_or_gpu(backend, "split", x):
        record("layer_norm", NAIVE)
        return layer_norm_naive(x, weight, bias, eps)
    record("layer_norm", "split")
    if torch.is_autocast_enabled(x.device.type):  # LayerNorm runs in float32 under autocast, as F.layer_norm does
        x, weight, bias = x.float(), weight.float(), bias.float()
    return SplitBackwardLayerNorm.apply(x, weight, bias, eps)


class LayerNorm(torch.nn.LayerNorm):
    """``nn.LayerNorm`` (same parameters and state dict) that uses :func:`layer_norm`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)
