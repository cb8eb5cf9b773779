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

``attention_at_rows(q, k, v, positions, window=None, key_bias=None, dropout_p=0.0, backend="auto")``: the causal (or
windowed) attention of a few query rows of each sequence against all its keys, the last block of a model that needs
its outputs at the labelled rows alone. Backends: ``"triton"`` (``at_rows.py``: one program per sequence and head),
``"naive"`` (``softmax_attention`` with the mask and bias that state it: the reference, and the path where the
queries and head dim do not fit one program, ``rows_fit``), ``"auto"`` Triton for CUDA tensors that fit.
``last_backend("attention_rows")`` says which ran.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.attention.dense import dense_attention
from zoo.kernels.backend import NAIVE, check_backend, record, recorded_path

BACKENDS = ("auto", "sdpa", "dense")
ROWS_BACKENDS = ("auto", "triton", NAIVE)
ROWS_TILE_MAX = 64 * 128  # query rows x head dim (each rounded by ``tile_side``) one Triton program holds
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


def tile_side(n: int) -> int:
    """A side of a Triton tile holding n rows or columns: a power of two, at least 16 (``tl.dot``'s least)."""
    return max(16, 1 << (n - 1).bit_length())


def rows_fit(queries: int, head_dim: int) -> bool:
    """Whether one program of ``attention_at_rows``' Triton kernels holds ``queries`` rows of ``head_dim`` (at most
    ``FUSED_HEAD_DIM_MAX``: its key blocks are in registers too)."""
    return head_dim <= FUSED_HEAD_DIM_MAX and tile_side(queries) * tile_side(head_dim) <= ROWS_TILE_MAX


def visible_keys(positions: torch.Tensor, keys: int, window: int | None = None) -> torch.Tensor:
    """(B, 1, K, keys) bool: whether the query at each of ``positions`` (B, K) sees each key: keys j <= p, and
    j > p - window with a window."""
    key = torch.arange(keys, device=positions.device)
    query = positions[:, None, :, None]
    seen = key <= query
    return seen if window is None else seen & (key > query - window)


def attention_at_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                      window: int | None = None, key_bias: torch.Tensor | None = None, dropout_p: float = 0.0,
                      backend: str = "auto") -> torch.Tensor:
    """Attention from the queries at ``positions`` alone: softmax(q k^T / sqrt(D) + key_bias_j, over the keys each
    query sees) with dropout ``dropout_p`` on the probabilities, times v.

    Args:
        q: (B, K, H, D), the queries at ``positions`` (B, K) (int, each in [0, L)).
        k, v: (B, L, H, D).
        window: None (the query at p sees keys j <= p) or w >= 1 (p - w < j <= p).
        key_bias: None, or (B, L, H) float added to the logits of key j (differentiable; GatedFWA's decay).
        dropout_p: dropout on the attention probabilities (0 outside training).
    Returns:
        o: (B, K, H, D) in q's dtype.
    """
    check_backend(backend, ROWS_BACKENDS)
    B, K, H, D = q.shape
    if positions.shape != (B, K) or k.dim() != 4 or k.shape[0] != B or k.shape[2:] != (H, D) or v.shape != k.shape:
        raise ValueError(f"attention_at_rows: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} and "
                         f"positions {tuple(positions.shape)} are not valid: expected q (B, K, H, D), k and v "
                         "(B, L, H, D), positions (B, K)")
    if window is not None and window < 1:
        raise ValueError(f"attention_at_rows: window={window!r} is not valid: expected None or an integer >= 1")
    if not 0 <= dropout_p < 1:
        raise ValueError(f"attention_at_rows: dropout_p={dropout_p!r} is not valid: expected a probability in [0, 1)")
    fits = (rows_fit(K, D) and q.dtype == k.dtype == v.dtype and q.dtype in (torch.bfloat16, torch.float16,
                                                                             torch.float32)
            and (dropout_p == 0 or B * H * K * k.shape[1] < 2 ** 31))  # dropout draws by each score's int32 index
    fast = recorded_path("attention_rows", backend if fits or backend != "auto" else NAIVE, "triton",
                         "zoo.kernels.attention.at_rows", q,
                         "attention from the labelled rows on GPU (falls back to softmax_attention with a mask)")
    if fast is not None:
        return fast.attention_at_rows(q, k, v, positions, window, key_bias, dropout_p)
    bias = None if key_bias is None else key_bias.permute(0, 2, 1)[:, :, None, :]
    o = softmax_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                          visible_keys(positions, k.shape[1], window), bias, dropout_p)
    return o.transpose(1, 2)
