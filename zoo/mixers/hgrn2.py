"""HGRN2 (Qin et al. 2024), as fla 0.6.0's ``HGRN2Attention`` layer.

A gated linear RNN whose state is expanded by outer products, with the input gate tied to the forget
gate (k = 1 - f). Per head, with F = expand_ratio forget channels and I = D / H input channels::

    q = swish(x W_q), g = logsigmoid(x W_f)  [B, T, H, F];  i = x W_i  [B, T, H, I]
    S_t = diag(exp(g_t)) S_{t-1} + (1 - exp(g_t)) i_t^T,  o_t = F^-1/2 S_t^T q_t
    y = W_o RMSNorm(o)   (one RMSNorm over all D channels)

``zoo.kernels.gla``: fla's ``chunk_gla`` on GPU, the PyTorch recurrence on CPU.

Deviations from fla, on purpose:

* ``expand_ratio`` defaults to fla's 128 only where D >= 128; below, one head of F = D (fla would build
  zero heads). ``expand_ratio=128`` restores fla's value at every width it can build.
* fla's ``HGRN2Model`` (not the layer) adds a learned lower bound to layer i's forget gate that couples
  all layers (a softmax over layers); zoo builds each mixer alone, so it runs the layer as fla does
  when no bound is given (as fla's first layer always does).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.kernels.gla import gla
from zoo.kernels.rows import rows_at
from zoo.errors import ConfigError
from zoo.mixers.linear_blocks import HeadRMSNorm
from zoo.mixers.registry import register_mixer

FLA_EXPAND_RATIO = 128


@register_mixer("hgrn2")
class HGRN2(nn.Module):
    """HGRN2 attention: (B, L, D) -> (B, L, D).

    Args:
        d_model: D.
        expand_ratio: F, the state expansion per head; H = D // F heads, and H must divide D
            (None: min(128, D), see above).
    """

    outputs_at_positions = True  # forward(x, positions): the output norm and o_proj on those rows alone

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, expand_ratio: int | None = None):
        super().__init__()
        if expand_ratio is None:
            expand_ratio = min(FLA_EXPAND_RATIO, d_model)
        if not isinstance(expand_ratio, int) or not 1 <= expand_ratio <= d_model or d_model % (d_model // expand_ratio):
            raise ConfigError("model.mixer_kwargs.expand_ratio", expand_ratio,
                              f"an integer in [1, d_model={d_model}] with d_model // expand_ratio dividing d_model")
        self.num_heads, self.expand_ratio, self.d_model = d_model // expand_ratio, expand_ratio, d_model
        forget_dim = self.num_heads * expand_ratio
        self.q_proj = nn.Linear(d_model, forget_dim, bias=False)
        self.f_proj = nn.Linear(d_model, forget_dim, bias=False)
        self.i_proj = nn.Linear(d_model, d_model, bias=False)
        self.g_norm = HeadRMSNorm(d_model)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the
        output norm and o_proj on those rows; the recurrence still walks every row."""
        B, L, D = x.shape
        H = self.num_heads
        q = F.silu(self.q_proj(x)).view(B, L, H, -1)
        i = self.i_proj(x).view(B, L, H, -1)
        g = F.logsigmoid(self.f_proj(x).float()).view(B, L, H, -1)
        k = (1 - g.exp()).to(i.dtype)  # the input gate, tied to the forget gate
        o = gla(q, k, i, g).flatten(2)
        return self.o_proj(self.g_norm(o if positions is None else rows_at(o, positions)))

    def state_size(self, seq_len: int) -> int:
        """Values of recurrent state per sequence: H states of (F, D / H), i.e. D * F."""
        return self.d_model * self.expand_ratio
