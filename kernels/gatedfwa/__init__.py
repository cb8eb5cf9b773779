"""GatedFWA kernels: the gate preprocessing scan and gated sliding-window attention.

``backend`` picks the implementation: ``"auto"`` (Triton on CUDA tensors, the PyTorch reference
otherwise), ``"triton"`` or ``"torch"``. Both are differentiable in every tensor argument.
"""
from __future__ import annotations

import torch

from kernels.gatedfwa.naive import gate_cumsum_ref, gated_window_attention_ref
from zoo.errors import ConfigError

BACKENDS = ("auto", "torch", "triton")


def _use_triton(backend: str, x: torch.Tensor) -> bool:
    if backend not in BACKENDS:
        raise ConfigError("backend", backend, BACKENDS)
    return backend == "triton" or (backend == "auto" and x.is_cuda)


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
        raise ConfigError("beta.shape", tuple(beta.shape), f"the (B, T, H) shape of h, {tuple(h.shape)}")
    if _use_triton(backend, h):
        from kernels.gatedfwa.gate_scan import gate_cumsum_triton
        return gate_cumsum_triton(h, beta, eps)
    return gate_cumsum_ref(h, beta, eps)


def gated_window_attention(q, k, v, u, window: int, scale: float | None = None, backend: str = "auto"):
    """Sliding-window attention with the GatedFWA decay bias (Algorithm 2).

    Query ``i`` attends to keys ``i - window < j <= i`` with logits ``q_i . k_j * scale + u_i - u_j``.

    Args:
        q, k, v: (B, T, H, D), any strides; bf16, fp16 or fp32 (fp64 on the torch backend).
        u: (B, T, H) float32 from :func:`gate_cumsum`, or None for plain sliding-window attention.
            ``u_i - u_j`` is formed from two fp32 numbers, so very long sequences with strong decay
            lose low-order bits of the bias; that is inherent to passing ``u``.
        window: keys per query including itself, >= 1; ``window >= T`` is causal attention.
        scale: logit scale, ``D ** -0.5`` when None.
    Returns:
        o: (B, T, H, D) in the dtype of q.
    """
    if not isinstance(window, int) or window < 1:
        raise ConfigError("window", window, "an integer >= 1")
    if k.shape != q.shape or v.shape != q.shape or q.dim() != 4:
        raise ConfigError("k.shape/v.shape", (tuple(k.shape), tuple(v.shape)),
                          f"the (B, T, H, D) shape of q, {tuple(q.shape)}")
    if u is not None and u.shape != q.shape[:3]:
        raise ConfigError("u.shape", tuple(u.shape), f"(B, T, H) = {tuple(q.shape[:3])}")
    if _use_triton(backend, q):
        from kernels.gatedfwa.attention import gated_window_attention_triton
        return gated_window_attention_triton(q, k, v, u, window, scale)
    return gated_window_attention_ref(q, k, v, u, window, scale)


__all__ = ["gate_cumsum", "gated_window_attention", "BACKENDS"]
