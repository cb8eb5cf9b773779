"""The QK norm GatedFWA's window attention can apply inside its kernels (plain PyTorch: a CPU install imports it)."""
from __future__ import annotations

from typing import NamedTuple

import torch


class QKNorm(NamedTuple):
    """RMSNorm of every query and key row over the head dim before the logits: weights [D] (None for the plain norm
    without them) and eps (None: ``rms_norm``'s default, the machine epsilon of the float32 math, float64's for
    float64 inputs). The Triton kernels read q and k as they come and keep no normalized copy; their backward
    returns the gradients of the raw q and k and of the two weights."""
    weight_q: torch.Tensor | None
    weight_k: torch.Tensor | None
    eps: float | None = None

    def eps_for(self, x: torch.Tensor) -> float:
        """The eps the norm adds for inputs like x."""
        return torch.finfo(torch.promote_types(x.dtype, torch.float32)).eps if self.eps is None else self.eps
