"""The reference implicit filter: Hyena's sin-MLP and decay window as plain PyTorch ops (what ``nn.Linear`` and
Zoology's ``Sin`` compute), in the inputs' dtype."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def implicit_filter_naive(z: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor],
                          freq: torch.Tensor, w_out: torch.Tensor, t: torch.Tensor,
                          deltas: torch.Tensor) -> torch.Tensor:
    """z [L, E]; weights[k] [F, E] (k = 0) or [F, F]; biases[k] [F]; freq [F]; w_out [D, F]; t [L, 1];
    deltas [D] -> h [L, D]: ``x = sin(freq * (x @ weights[k]^T + biases[k]))`` from x = z for each k, then
    ``(x @ w_out^T) * exp(-t * deltas)``."""
    x = z
    for w, b in zip(weights, biases):
        x = torch.sin(freq * F.linear(x, w, b))
    return F.linear(x, w_out) * torch.exp(-t * deltas)
