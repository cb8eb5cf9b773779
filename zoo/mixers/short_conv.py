"""Causal depthwise short convolution over time, shared by Hyena, Mamba, Mamba-2 and BASED."""
from __future__ import annotations

import torch
from torch import nn


class ShortConv(nn.Module):
    """Depthwise causal conv: (B, L, C) -> (B, L, C); output ``t`` sees inputs ``t-k+1 .. t``.

    Args:
        channels: C, convolved independently.
        kernel_size: k, the filter length (the recurrent state keeps the last ``k-1`` inputs).
    """

    def __init__(self, channels: int, kernel_size: int, bias: bool = True):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, padding=kernel_size - 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        L = x.shape[1]
        return self.conv(x.transpose(1, 2))[..., :L].transpose(1, 2)

    def state_numel(self) -> int:
        """Numbers kept per sequence to continue the convolution step by step."""
        return self.conv.in_channels * (self.kernel_size - 1)
