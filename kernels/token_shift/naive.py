"""The reference token-shift mix: ``F.pad`` for the previous token and one broadcast ``torch.addcmul`` for all G
mixes, computed in x's dtype (the mixes cast to it)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def token_shift_mix_naive(x: torch.Tensor, mixes: torch.Tensor,
                          out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, ...]:
    """x [B, T, D]; mixes [G, D] -> G tensors [B, T, D]: ``x + (x_prev - x) * mixes[g]``, x_prev[:, t] = x[:, t - 1]
    and 0 at t = 0; computed in x's dtype, then cast to ``out_dtype`` where given."""
    y = torch.addcmul(x, F.pad(x, (0, 0, 1, -1)) - x, mixes.to(x.dtype)[:, None, None])
    return (y if out_dtype is None else y.to(out_dtype)).unbind(0)
