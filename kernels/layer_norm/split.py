"""LayerNorm with PyTorch's forward and input gradient, and the weight and bias gradients as plain column sums
(the fast path of ``zoo.kernels.layer_norm`` for tall, narrow inputs; see its docstring for why)."""
from __future__ import annotations

import torch


class SplitBackwardLayerNorm(torch.autograd.Function):
    """F.layer_norm's forward and input gradient; the weight and bias gradients as two column sums."""

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
