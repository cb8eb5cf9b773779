"""Causal depthwise short convolution over time, shared by Hyena, Mamba, Mamba-2, BASED and DeltaNet."""
from __future__ import annotations

import torch
from torch import nn

from zoo.kernels.short_conv import check_activation, short_conv


class ShortConv(nn.Module):
    """Depthwise causal conv: (B, L, C) -> (B, L, C); output ``t`` sees inputs ``t-k+1 .. t``.

    The parameters are an ``nn.Conv1d``'s (state dict ``conv.weight`` [C, 1, k], ``conv.bias`` [C]), but the
    forward is :func:`zoo.kernels.short_conv.short_conv` on the (B, L, C) layout, without the transposes.

    Args:
        channels: C, convolved independently.
        kernel_size: k, the filter length (the recurrent state keeps the last ``k-1`` inputs).
        activation: None or ``"silu"``, applied to the output inside the same kernel.
    """

    def __init__(self, channels: int, kernel_size: int, bias: bool = True, activation: str | None = None):
        super().__init__()
        check_activation(activation)
        self.kernel_size, self.activation = kernel_size, activation
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, padding=kernel_size - 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return short_conv(x, self.conv.weight[:, 0], self.conv.bias, self.activation)

    def state_numel(self) -> int:
        """Numbers kept per sequence to continue the convolution step by step."""
        return self.conv.in_channels * (self.kernel_size - 1)
