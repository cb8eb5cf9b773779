"""LayerNorm with a faster weight/bias gradient for the tall, narrow inputs of small models.

For x of shape [..., D] with many rows and a small D (e.g. 65536 x 128 in the MQAR grid), PyTorch's
fused LayerNorm backward spends most of its time in the kernel that reduces the weight and bias
gradients over rows (measured on an H100: about 0.26 ms per call, more than the attention backward).
Here the input gradient still comes from PyTorch's kernel, and the weight and bias gradients are two
plain column sums, which PyTorch's reduction kernels do at memory speed. Values are those of
``F.layer_norm`` (the same forward kernel); gradients agree to rounding.

``layer_norm(x, weight, bias, eps, backend="auto")``: ``"split"`` uses the split backward, ``"torch"``
``F.layer_norm``, ``"auto"`` the split backward on CUDA tensors.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

BACKENDS = ("auto", "split", "torch")


class _SplitBackwardLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        shape = (x.shape[-1],)
        out, mean, rstd = torch.native_layer_norm(x, shape, weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        shape = (x.shape[-1],)
        dx = torch.ops.aten.native_layer_norm_backward(grad, x, shape, mean, rstd, weight, bias,
                                                      [True, False, False])[0]
        acc = torch.promote_types(x.dtype, torch.float32)  # sums in float32 at least
        rows = grad.reshape(-1, shape[0]).to(acc)
        xhat = (x.reshape(-1, shape[0]).to(acc) - mean.reshape(-1, 1)) * rstd.reshape(-1, 1)
        dweight = (rows * xhat).sum(0).to(weight.dtype)
        dbias = rows.sum(0).to(bias.dtype)
        return dx, dweight, dbias, None


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
               backend: str = "auto") -> torch.Tensor:
    """LayerNorm over the last dim of x [..., D] with weight, bias [D]."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not valid: expected one of {', '.join(BACKENDS)}")
    if backend == "torch" or (backend == "auto" and not x.is_cuda):
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    if torch.is_autocast_enabled(x.device.type):  # LayerNorm runs in float32 under autocast, as F.layer_norm does
        x, weight, bias = x.float(), weight.float(), bias.float()
    return _SplitBackwardLayerNorm.apply(x, weight, bias, eps)


class LayerNorm(torch.nn.LayerNorm):
    """``nn.LayerNorm`` (same parameters and state dict) that uses :func:`layer_norm`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)
