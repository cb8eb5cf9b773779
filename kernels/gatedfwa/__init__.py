"""GatedFWA kernels: the gate preprocessing scan and gated sliding-window attention.

``backend`` picks the implementation: ``"auto"`` (Triton on CUDA tensors, the PyTorch reference in
``naive.py`` otherwise), ``"triton"`` or ``"naive"``. Both are differentiable in every tensor argument.
``zoo.kernels.backend.last_backend("gatedfwa.gate_cumsum")`` / ``("gatedfwa.attention")`` say which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, named_or_gpu, record
from zoo.kernels.gatedfwa.naive import gate_cumsum_ref, gated_window_attention_ref

BACKENDS = ("auto", "triton", NAIVE)


def _use_triton(op: str, backend: str, x: torch.Tensor) -> bool:
    check_backend(backend, BACKENDS)
    triton = named_or_gpu(backend, "triton", x)
    record(op, "triton" if triton else NAIVE)
    return triton


def gate_cumsum(h: torch.Tensor, beta: torch.Tensor, eps: float = 1e-6, backend: str = "auto"):
    """GatedFWA preprocessing (Algorithm 1): the log-decay prefix of the gate.

    Args:
        h: (B, T, H) gate pre-activations.
        beta: (B, T, H) positive gate temperatures.
        eps: keeps ``1 / (beta + eps)`` finite.
    Returns:
        u: (B, T, H) float32, ``u_t = -sum_{s<=t} softplus(beta_s * h_s) / (beta_s + eps)``.
    """
    if h.shape != beta.shape or h.dim() != 3:
        raise ValueError(f"beta.shape={tuple(beta.shape)} is not valid: expected the (B, T, H) shape of h, "
                         f"{tuple(h.shape)}")
    if _use_triton("gatedfwa.gate_cumsum", backend, h):
        from zoo.kernels.gatedfwa.gate_scan import gate_cumsum_triton
        return gate_cumsum_triton(h, beta, eps)
    return gate_cumsum_ref(h, beta, eps)


def gated_window_attention(q, k, v, u, window: int, scale: float | None = None, backend: str = "auto"):
    """Sliding-window attention with the GatedFWA decay bias (Algorithm 2).

    Query ``i`` attends to keys ``i - window < j <= i`` with logits ``q_i . k_j * scale + u_i - u_j``.

    Args:
        q, k, v: (B, T, H, D), any strides; bf16, fp16 or fp32 (fp64 on the naive backend).
        u: (B, T, H) float32 from :func:`gate_cumsum`, or None for plain sliding-window attention.
            ``u_i - u_j`` is formed from two fp32 numbers, so very long sequences with strong decay
            lose low-order bits of the bias; that is inherent to passing ``u``.
        window: keys per query including itself, >= 1; ``window >= T`` is causal attention.
        scale: logit scale, ``D ** -0.5`` when None.
    Returns:
        o: (B, T, H, D) in the dtype of q.
    """
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window={window!r} is not valid: expected an integer >= 1")
    if k.shape != q.shape or v.shape != q.shape or q.dim() != 4:
        raise ValueError(f"k.shape/v.shape={tuple(k.shape)}/{tuple(v.shape)} is not valid: expected the "
                         f"(B, T, H, D) shape of q, {tuple(q.shape)}")
    if u is not None and u.shape != q.shape[:3]:
        raise ValueError(f"u.shape={tuple(u.shape)} is not valid: expected (B, T, H) = {tuple(q.shape[:3])}")
    if _use_triton("gatedfwa.attention", backend, q):
        from zoo.kernels.gatedfwa.attention import gated_window_attention_triton
        return gated_window_attention_triton(q, k, v, u, window, scale)
    return gated_window_attention_ref(q, k, v, u, window, scale)


__all__ = ["gate_cumsum", "gated_window_attention", "BACKENDS"]
