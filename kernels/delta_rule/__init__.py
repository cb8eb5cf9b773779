"""The delta rule: a linear-attention state corrected toward each new value, optionally decayed.

``delta_rule(q, k, v, beta, g=None, scale=None, l2norm_qk=False, backend="auto")``: ``"fla"``
(flash-linear-attention's ``chunk_delta_rule``, or ``chunk_gated_delta_rule`` when a gate ``g`` is
given), ``"fla_recurrent"`` (its ``fused_recurrent_delta_rule``; ungated only: fla's gated fused recurrence
has no backward), ``"chunked"`` (``chunked.delta_rule_chunked``, the same recurrence by chunks in batched
PyTorch matmuls), ``"naive"`` (``naive.delta_rule_recurrent``, the PyTorch recurrence, one step at a time)
or ``"auto"``: for CUDA tensors, fla's chunks where fla imports and they are reliable (see
``zoo.kernels.backend``), else fla's fused recurrence (ungated, where fla imports) or the chunked form (gated);
elsewhere the PyTorch recurrence. Used by ``deltanet`` (no gate) and ``gated_deltanet``.
``zoo.kernels.backend.last_backend("delta_rule")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import (CHUNKED, FLA_RECURRENT, NAIVE, check_backend, fast_path, fla_path, named_or_gpu,
                                 record)
from zoo.kernels.delta_rule.chunked import delta_rule_chunked
from zoo.kernels.delta_rule.naive import delta_rule_recurrent

BACKENDS = ("auto", "fla", FLA_RECURRENT, CHUNKED, NAIVE)


def delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor | None = None,
               scale: float | None = None, l2norm_qk: bool = False, backend: str = "auto") -> torch.Tensor:
    """q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H] writing strengths; g: [B, T, H] log forget gates
    or None; scale: K ** -0.5 when None; l2norm_qk: unit-length q and k first -> o: [B, T, H, V]."""
    check_backend(backend, BACKENDS)
    if backend == CHUNKED:
        fla, used = None, CHUNKED
    elif g is None:
        fla, used = fla_path(backend, "fla.ops.delta_rule", q, "deltanet on GPU (falls back to the PyTorch recurrence)")
    else:
        if backend == FLA_RECURRENT:
            raise ValueError("backend='fla_recurrent' is not valid with a gate g: fla's gated fused recurrence "
                             "has no backward; expected one of auto, fla, chunked, naive")
        fla = fast_path(backend, "fla", "fla.ops.gated_delta_rule", q,
                        "gated_deltanet on GPU (falls back to the chunked PyTorch form)")
        # not the step-by-step recurrence on a GPU: it launches several tiny kernels per time step
        used = "fla" if fla is not None else CHUNKED if named_or_gpu(backend, CHUNKED, q) else NAIVE
    record("delta_rule", used)
    if used == CHUNKED:
        return delta_rule_chunked(q, k, v, beta, g, scale, l2norm_qk)
    if used == NAIVE:
        return delta_rule_recurrent(q, k, v, beta, g, scale, l2norm_qk)
    if used == FLA_RECURRENT:
        return fla.fused_recurrent_delta_rule(q=q, k=k, v=v, beta=beta.to(q.dtype), scale=scale,
                                              use_qk_l2norm_in_kernel=l2norm_qk)[0]
    if g is None:
        o, _ = fla.chunk_delta_rule(q=q, k=k, v=v, beta=beta.to(q.dtype), scale=scale,
                                    use_qk_l2norm_in_kernel=l2norm_qk)
    else:
        o, _ = fla.chunk_gated_delta_rule(q=q, k=k, v=v, g=g, beta=beta.to(q.dtype), scale=scale,
                                          use_qk_l2norm_in_kernel=l2norm_qk)
    return o


__all__ = ["delta_rule", "BACKENDS"]
