"""Causal or masked softmax attention with a logit bias and dropout: ``softmax_attention``, the entry of zoo's
attention mixers (GatedFWA's too, from its labelled rows).

Backends: ``"sdpa"`` (``F.scaled_dot_product_attention``: FlashAttention or cuDNN on a GPU up to head dim 256, its
memory-efficient kernel past that, its math form on a CPU) and ``"dense"`` (``dense.py``: the score matrix in memory,
two cuBLAS matmuls and row-wise softmax and dropout around them). ``"auto"`` takes dense for CUDA tensors whose head
dim is over ``FUSED_HEAD_DIM_MAX`` or that come with a bias (whose gradient not every SDPA kernel gives), SDPA
otherwise: past 256, SDPA's memory-efficient backward was the slowest kernel of the grid's softmax runs at
d_model=512 (one head of 512), 2.4 ms a call at MQAR N=512, batch 128 on an H100, 63% of the GPU time of a group's
step (``python -m zoo.bench.profile --cell 512,512 --group 4``).
``zoo.kernels.backend.last_backend("attention")`` says which ran.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.attention.dense import dense_attention
from zoo.kernels.backend import check_backend, record

BACKENDS = ("auto", "sdpa", "dense")
FUSED_HEAD_DIM_MAX = 256  # the largest head dim of SDPA's FlashAttention and cuDNN kernels


def causal_mask(m: int, n: int, device: torch.device | str) -> torch.Tensor:
    """(m, n) bool: query i, the (n - m + i)-th of n positions, sees keys j <= n - m + i."""
    return torch.ones(m, n, dtype=torch.bool, device=device).tril(n - m)


def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                      bias: torch.Tensor | None = None, dropout_p: float = 0.0, backend: str = "auto") -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + bias, masked), dropout ``dropout_p`` on the probabilities, times v.

    Args:
        q: (B, H, M, D); k, v: (B, H, N, D).
        mask: bool, broadcastable to (B, H, M, N), True where the query sees the key; None is causal (M == N).
        bias: None, or float, broadcastable to (B, H, M, N), added to the logits (differentiable).
        dropout_p: dropout on the attention probabilities (0 outside training).
    Returns:
        o: (B, H, M, D) in q's dtype.
    """
    check_backend(backend, BACKENDS)
    dense = backend == "dense" or (backend == "auto" and q.is_cuda and (q.shape[-1] > FUSED_HEAD_DIM_MAX
                                                                        or bias is not None))
    record("attention", "dense" if dense else "sdpa")
    if dense or bias is not None:
        mask = causal_mask(q.shape[2], k.shape[2], q.device) if mask is None else mask
    if dense:
        return dense_attention(q, k, v, mask, bias, dropout_p)
    if bias is not None:  # SDPA adds a float mask to the logits
        mask = bias.masked_fill(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, dropout_p=dropout_p)
