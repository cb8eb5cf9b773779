"""RWKV-4 time mixing (Peng et al. 2023), the RWKV baseline of Zoology and the GatedFWA paper.

Token shift mixes each token with the previous one (``zoo.kernels.token_shift``: one Triton kernel each way on GPU,
``F.pad`` and ``torch.addcmul`` on CPU), then ``k, v, r`` projections, the WKV operator (``kernels/wkv4``: a
per-channel decayed, normalized average of past values with a bonus ``u`` for the current token), the receptance
gate ``sigmoid(r)`` and the ``output`` projection. ``zoo.kernels.wkv4``: our Triton WKV on GPU, the PyTorch
recurrence on CPU. Definition and initialisation follow Zoology's ``RWKVTimeMixer`` (RWKV-LM's v4 time mixing).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from zoo.errors import ConfigError
from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.linear import Linear
from zoo.kernels.rows import rows_at
from zoo.kernels.token_shift import token_shift_mix
from zoo.kernels.wkv4 import wkv4
from zoo.mixers.registry import register_mixer


def depth_ratios(layer_idx: int, n_layers: int) -> tuple[float, float]:
    """RWKV's depth schedule: ``(layer_idx / (n_layers - 1), 1 - layer_idx / n_layers)``, i.e. 0 -> 1 and
    1 -> almost 0 from the first layer to the last (the first is 0 for a single layer)."""
    return layer_idx / max(n_layers - 1, 1), 1.0 - layer_idx / n_layers


@register_mixer("rwkv")
class RWKV4(nn.Module):
    """RWKV-4 time mixing: (B, L, D) -> (B, L, D).

    ``n_layers`` is the model's depth (the model passes it, like ``layer_idx``): the decay, bonus and
    token-shift initialisation changes with ``layer_idx / n_layers`` as in RWKV-LM.

    Args:
        init_depth: the depth that schedule assumes. None (the default): the model's real depth, as RWKV-LM.
            Zoology's ``RWKVTimeMixer`` takes the same schedule but is never given the depth, so its 2-layer
            MQAR models use its default ``n_layer=12``: ``init_depth=12`` reproduces them (a deliberate
            deviation of zoo's default, this kwarg restores the reference behaviour).
    """

    outputs_at_positions = True  # forward(x, positions): the receptance and output projection on those rows alone

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, n_layers: int = 2,
                 init_depth: int | None = None):
        super().__init__()
        D = d_model
        if init_depth is not None and not (isinstance(init_depth, int) and init_depth > layer_idx):
            raise ConfigError("model.mixer_kwargs.init_depth", init_depth,
                              f"None or an integer above the layer index ({layer_idx})")
        ratio_0_to_1, ratio_1_to_almost0 = depth_ratios(layer_idx, init_depth or n_layers)
        h = torch.arange(D, dtype=torch.float64)
        ddd = h / D
        # per-step decay rate w = exp(time_decay), slow for the first channels, fast for the last
        self.time_decay = nn.Parameter((-5 + 8 * (h / max(D - 1, 1)) ** (0.7 + 1.3 * ratio_0_to_1)).float())
        self.time_first = nn.Parameter((math.log(0.3) + 0.5 * ((h + 1) % 3 - 1)).float())
        self.time_mix_k = nn.Parameter((ddd ** ratio_1_to_almost0).float())
        self.time_mix_v = nn.Parameter((ddd ** ratio_1_to_almost0 + 0.3 * ratio_0_to_1).float())
        self.time_mix_r = nn.Parameter((ddd ** (0.5 * ratio_1_to_almost0)).float())
        self.key = Linear(D, D, bias=False)
        self.value = Linear(D, D, bias=False)
        self.receptance = Linear(D, D, bias=False)
        self.output = Linear(D, D, bias=False)  # Zoology's name (it gets no "out_proj" scaled init)
        self.d_model = D

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the
        receptance, its gate and the output projection on those rows; WKV still walks every row."""
        # token shift: RWKV-LM's lerp(x_{t-1}, x, mu) = x + (x_{t-1} - x) (1 - mu), x_{t-1} = 0 at t = 0; the three
        # mixes in one pass each way, made in the dtype their projections read under autocast
        mixes = 1 - torch.stack([self.time_mix_k, self.time_mix_v, self.time_mix_r])
        xk, xv, xr = token_shift_mix(x, mixes, out_dtype=matmul_dtype(x))
        w, u, k, v = torch.exp(self.time_decay.float()), self.time_first.float(), self.key(xk), self.value(xv)
        out_dtype = matmul_dtype(x) or x.dtype  # the dtype the output projection reads
        if positions is None:  # the receptance gate sigmoid(r) * y inside WKV
            y = wkv4(w, u, k, v, r=self.receptance(xr), out_dtype=out_dtype)
        else:  # the receptance and its gate on the labelled rows alone
            y = rows_at(wkv4(w, u, k, v), positions)
            y = (torch.sigmoid(self.receptance(rows_at(xr, positions)).to(y.dtype)) * y).to(out_dtype)
        return self.output(y)

    def state_size(self, seq_len: int) -> int:
        """Values per sequence: WKV's numerator, denominator and running max exponent per channel, plus
        the previous token for the shift (RWKV-LM's RNN state ``aa, bb, pp, xx``): ``4 D``."""
        return 4 * self.d_model
