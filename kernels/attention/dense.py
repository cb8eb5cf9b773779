"""Softmax attention with its score matrix in memory, for head dims the fused kernels lack.

The scores are one batched matmul (bf16 in, float32 out on CUDA, the logit scale in its epilogue); the mask, softmax
and dropout are row operations over the (M, N) scores; the output is a second matmul. The backward is written out
(masked entries of P are zero, so it needs no mask). The arithmetic is SDPA's: float32 logits and softmax, dropout on
the probabilities, P in the value dtype for the PV matmul.

Shapes: q (B, H, M, D), k and v (B, H, N, D), ``mask`` a bool tensor broadcastable to (B, H, M, N), True where the
query sees the key (every query must see at least one key); ``bias`` None or a float tensor broadcastable to (B, H,
M, N) added to the scaled logits (GatedFWA's decay u_i - u_j), differentiable; o (B, H, M, D) in q's dtype.
"""
from __future__ import annotations

import torch


def _matmul(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, alpha: float = 1.0) -> torch.Tensor:
    """alpha * a @ b for (G, M, K) @ (G, K, N): bf16/fp16 inputs accumulate in float32 and are written in
    ``out_dtype`` by one cuBLAS call on CUDA; elsewhere (CPU tests, float32/64 inputs) the float math of a's dtype."""
    if a.dtype == out_dtype or not a.is_cuda:
        wide = torch.promote_types(a.dtype, out_dtype)
        return torch.baddbmm(a.new_zeros((), dtype=wide).expand(1, 1, 1), a.to(wide), b.to(wide), beta=0,
                             alpha=alpha).to(out_dtype)
    return torch.baddbmm(a.new_zeros(()).expand(1, 1, 1), a, b, out_dtype=out_dtype, beta=0, alpha=alpha)


def _float(x: torch.Tensor) -> torch.dtype:
    """The dtype of the logits and probabilities: float32, or float64 for float64 inputs."""
    return torch.promote_types(x.dtype, torch.float32)


def _per_head(t: torch.Tensor, shape: tuple[int, int, int, int]) -> list[torch.Tensor]:
    """A tensor broadcastable to (B, H, M, N) -> each head's (B, M, N) view."""
    full = t.expand(shape)
    return [full[:, h] for h in range(shape[1])]


def _heads_to(parts: list[torch.Tensor]) -> torch.Tensor:
    """Each head's (B, M, D) -> (B, H, M, D), a view of a (B, M, H, D) tensor: the mixers' layout, which their
    projections read and their gradients' concatenation writes without a transpose."""
    return (parts[0].unsqueeze(2) if len(parts) == 1 else torch.stack(parts, dim=2)).transpose(1, 2)


class _DenseAttention(torch.autograd.Function):
    """Head by head: each head's q, k, v (B, M, D) slices are strided matrices cuBLAS reads where they lie (a
    reshape to (B * H, M, D) would copy them from the mixers' (B, M, H, D) layout)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, bias, dropout_p: float, scale: float):
        B, H, M, D = q.shape
        N = k.shape[2]
        shape = (B, H, M, N)
        hidden = _per_head(~mask, shape)
        biases = _per_head(bias, shape) if bias is not None else [None] * H
        ps, keeps, drops, outs = [], [], [], []
        for h in range(H):
            logits = _matmul(q[:, h], k[:, h].transpose(1, 2), _float(q), scale)
            if biases[h] is not None:
                logits += biases[h]
            p = torch.softmax(logits.masked_fill_(hidden[h], float("-inf")), dim=-1)
            p_drop, keep = torch.native_dropout(p, dropout_p, True) if dropout_p > 0 else (p, None)
            p_drop = p_drop.to(v.dtype)
            outs.append(_matmul(p_drop, v[:, h], v.dtype))
            ps.append(p)
            keeps += [keep] if keep is not None else []
            drops.append(p_drop)
        ctx.save_for_backward(q, k, v, *ps, *keeps, *drops)
        ctx.shape, ctx.dropout_p, ctx.scale = shape, dropout_p, scale
        ctx.bias_shape = None if bias is None else bias.shape
        return _heads_to(outs)

    @staticmethod
    def backward(ctx, do):
        q, k, v, *saved = ctx.saved_tensors
        B, H, M, N = ctx.shape
        ps, saved = saved[:H], saved[H:]
        keeps, drops = (saved[:H], saved[H:]) if ctx.dropout_p > 0 else ([None] * H, saved)
        do = do.to(v.dtype)
        dqs, dks, dvs, dbiases = [], [], [], []
        for h in range(H):
            dvs.append(_matmul(drops[h].transpose(1, 2), do[:, h], v.dtype))
            dp = _matmul(do[:, h], v[:, h].transpose(1, 2), ps[h].dtype)
            if keeps[h] is not None:
                dp = torch.ops.aten.native_dropout_backward(dp, keeps[h], 1.0 / (1.0 - ctx.dropout_p))
            ds_wide = torch.ops.aten._softmax_backward_data(dp, ps[h], -1, ps[h].dtype)
            if ctx.needs_input_grad[4]:
                dbiases.append(ds_wide)
            ds = ds_wide.to(q.dtype)
            dqs.append(_matmul(ds, k[:, h], q.dtype, ctx.scale))
            dks.append(_matmul(ds.transpose(1, 2), q[:, h], k.dtype, ctx.scale))
        dbias = None
        if dbiases:  # the logits' gradient, summed over the bias's broadcast dimensions
            dbias = torch.stack(dbiases, dim=1)
            dbias = dbias.sum_to_size(ctx.bias_shape) if dbias.shape != ctx.bias_shape else dbias
        return _heads_to(dqs), _heads_to(dks), _heads_to(dvs), None, dbias, None, None


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                    bias: torch.Tensor | None = None, dropout_p: float = 0.0,
                    scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale + bias, masked) with dropout ``dropout_p`` on the probabilities, times v (shapes: module
    doc). Same function as ``F.scaled_dot_product_attention(q, k, v, attn_mask=bias masked with -inf, dropout_p=...,
    scale=scale)``, with other random numbers for dropout."""
    if q.dim() != 4 or k.shape != v.shape or k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3]:
        raise ValueError(f"q, k, v shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)} are not valid: "
                         "expected q (B, H, M, D) and k, v (B, H, N, D)")
    if not 0 <= dropout_p < 1:
        raise ValueError(f"dropout_p={dropout_p!r} is not valid: expected a probability in [0, 1)")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask.dtype={mask.dtype} is not valid: expected torch.bool (True where a query sees a key)")
    if bias is not None and not bias.is_floating_point():
        raise ValueError(f"bias.dtype={bias.dtype} is not valid: expected a float tensor added to the logits")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return _DenseAttention.apply(q, k, v, mask, bias, float(dropout_p), float(scale))
