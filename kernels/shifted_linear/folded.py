"""Token-shift mixes folded into the projections that read them: one matmul of [x, x_prev] for all of them.

Each projection reads its own mix of a token and the one before it, W (x + (x_prev - x) mu) = W (1 - mu) x + W mu
x_prev. So with X2 = [x, x_prev] ([B, T, 2D]) and the folded weight [W (1 - mu), W mu] ([N, 2D], each row of W
scaled by its mix along D), every projection of every mix is one matmul X2 @ W2^T, the parts side by side.

Why: RWKV-7 writes six mixed copies of x a layer ([B, T, D] each), and its seven projections of them each read
one (v's mix feeds two); backward, seven input gradients come back and are summed into x's. At MQAR's figure-2
cell (B=256, T=256, D=128, bf16) that is about 300 MB a layer forward and 560 MB backward; folded, X2 is written
once (33.6 MB) and read by one matmul each way, about half the bytes and 4 kernels forward instead of 15. The
matmul's depth doubles (2D), which costs little while the matmul is memory-bound. Measured on an H100 80GB
(``python -m zoo.kernels.bench --shifted-linear``, RWKV-7's seven projections alone, bf16, forward + backward): 0.196
against 0.538 ms for the Triton token shift and a matmul per weight at that cell, 1.19 against 1.73 ms at B=128,
T=512, D=512, and even at D=1024 (2.00 against 1.99 ms).

The pieces: ``pair`` (X2, in autocast's matmul dtype) and ``fold`` (W2 in the weights' dtype, float32 in
training) are small elementwise functions, compiled by ``torch.compile`` in training on a GPU (one kernel each
way for ``pair``), plain PyTorch elsewhere; the matmul is ``zoo.kernels.linear.linear`` (W2's gradient in float32
from cuBLAS). A caller that splits the output into its parts inside a compiled function of its own gets the
output's gradient written whole by that function's kernels; split outside, autograd would concatenate the parts'
gradients in a pass of its own.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.backend import Compiled
from zoo.kernels.linear import linear


def pair(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x [B, T, D] -> [x, x_prev] [B, T, 2D] in ``dtype``; x_prev[:, t] = x[:, t - 1], zeros at t = 0."""
    return torch.cat([x, F.pad(x, (0, 0, 1, -1))], -1).to(dtype)


def fold(mixes: torch.Tensor, mix_of: tuple[int, ...], *weights: torch.Tensor) -> torch.Tensor:
    """mixes [G, D]; weights[i] [N_i, D] reading mix ``mix_of[i]`` -> [W (1 - mu), W mu] [N, 2D] (N = sum N_i),
    in the weights' dtype."""
    w = torch.cat(weights)
    mu = torch.cat([mixes[g].to(w.dtype).expand(wi.shape[0], -1) for g, wi in zip(mix_of, weights)])
    wmu = w * mu
    return torch.cat([w - wmu, wmu], -1)


PAIR_COMPILED = Compiled(pair, "the token shift's [x, x_prev]")
FOLD_COMPILED = Compiled(fold, "the token-shift mixes folded into the weights")


def shifted_linear_folded(x: torch.Tensor, mixes: torch.Tensor, weights: list[torch.Tensor],
                          mix_of: tuple[int, ...]) -> torch.Tensor:
    """``shifted_linear_naive``'s signature and values, to the matmul's rounding."""
    x2, _ = PAIR_COMPILED.in_training(x, matmul_dtype(x) or x.dtype)
    w2, _ = FOLD_COMPILED.in_training(mixes, tuple(mix_of), *weights)
    return linear(x2, w2, None)
