"""The reference norms: PyTorch's ``F.layer_norm`` and ``F.rms_norm``, the latter with the optional swish gate."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def layer_norm_naive(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim of x [..., N] with weight, bias [N]."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def rms_norm_naive(x: torch.Tensor, weight: torch.Tensor | None, eps: float, gate: torch.Tensor | None,
                   out_dtype: torch.dtype, gate_first: bool = False) -> torch.Tensor:
    """RMSNorm over the last dim of x [..., N] times weight [N], times silu(gate [..., N]), or with
    ``gate_first`` of x * silu(gate); float32 math at least (float64 stays), y [..., N] in ``out_dtype``."""
    acc = torch.promote_types(x.dtype, torch.float32)
    x = x.to(acc)
    if gate is not None and gate_first:
        x = x * F.silu(gate.to(acc))
    y = F.rms_norm(x, (x.shape[-1],), None if weight is None else weight.to(acc), eps)
    if gate is not None and not gate_first:
        y = y * F.silu(gate.to(acc))
    return y.to(out_dtype)
