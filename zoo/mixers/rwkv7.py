"""RWKV-7 "Goose" time mixing (Peng et al. 2025), the dynamic-state-evolution recurrence.

Per head, with state S: (K, V) and per-step log decay w_t < 0::

    S_t = diag(exp(w_t)) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T,   o_t = S_t^T r_t
    a_t = -kk_t, b_t = kk_t * iclr_t   (kk: normalized key, iclr: in-context learning rate)

Layer 0's values ``v_first`` travel to later layers through the model's ``layer_state`` dict and are
mixed into their values. The recurrence is ``zoo.kernels.rwkv7.rwkv7``: fla's ``chunk_rwkv7`` on GPU (zoo's Triton
chunked kernels where fla's chunks are unreliable: the layer's decays are bounded, w > -W_SCALE), the PyTorch
recurrence on CPU. The projections of x each read one of six token-shift mixes of the input
(x + (x_{t-1} - x) * x_*): ``zoo.kernels.shifted_linear``, on GPU one matmul of [x, x_{t-1}] with the mixes folded
into the weights.
The elementwise work between the projections and the recurrence (``recurrence_inputs``) and after it
(``read_out``) is a few dozen small PyTorch ops each way; in training on a GPU each of the two runs compiled by
``torch.compile`` (Inductor fuses it into a few kernels; on an H100 the GPU time of the model's elementwise,
reduction and norm kernels fell from 2.56 s to 1.12 s an epoch of the figure-2 cell), uncompiled where compiling
fails (said once), in evaluation and on CPU.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from zoo.kernels import backend
from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.backend import Compiled
from zoo.kernels.linear import Linear
from zoo.kernels.rows import rows_at
from zoo.kernels.rwkv7 import rwkv7
from zoo.kernels.shifted_linear import shifted_linear
from zoo.errors import ConfigError
from zoo.mixers.registry import register_mixer

W_SCALE = 0.6065306597126334  # exp(-0.5): per-step log decay lies in (-W_SCALE, 0)
# the token-shift mix (of x_r, x_w, x_k, x_v, x_a, x_g) each projection of x reads: r, k, v, then the w, a, g
# and (after layer 0) v LoRAs' down projections
MIX_OF = (0, 2, 3, 1, 4, 5, 3)


class LoRA(nn.Module):
    """The weights of one of the layer's low-rank projections, D -> rank -> out: ``up(act(down(x))) + bias``. The
    layer applies them itself: the down projection inside its one matmul of every projection of x
    (``zoo.kernels.shifted_linear``), the activation (tanh for the decay, sigmoid for the gate, none for the
    in-context learning rate and the value mix), the up projection and the bias in ``recurrence_inputs``.

    fla's initialisation: the down projection starts at zero, the up projection orthogonal with gain
    ``0.1 * max(1, sqrt(rank / out))``, the bias at zero (the layer then sets it).
    """

    def __init__(self, d_in: int, d_out: int, rank: int, bias: bool = True):
        super().__init__()
        self.down = nn.Linear(d_in, rank, bias=False)
        self.up = nn.Linear(rank, d_out, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_out)) if bias else None
        with torch.no_grad():
            nn.init.zeros_(self.down.weight)
            nn.init.orthogonal_(self.up.weight, gain=0.1 * max(1.0, math.sqrt(rank / d_out)))


def default_rank(d_model: int, head_dim: int, scale: float, per_head: bool = True) -> int:
    """fla's LoRA rank rule: ``scale * sqrt(D)`` (times ``head_dim / 64`` where ``per_head``) rounded to a
    multiple of 32, at least 32."""
    factor = head_dim / 64 if per_head else 1.0
    return max(32, int(round(scale * d_model ** 0.5 * factor / 32) * 32))


def recurrence_inputs(proj: torch.Tensor, w_up: torch.Tensor, w_bias: torch.Tensor, a_up: torch.Tensor,
                      a_bias: torch.Tensor, g_up: torch.Tensor, v_first: torch.Tensor | None,
                      v_up: torch.Tensor | None, v_bias: torch.Tensor | None, k_k: torch.Tensor, k_a: torch.Tensor,
                      r_k: torch.Tensor, positions: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """The recurrence's r, w, k, v, a, b [B, L, H, K] (contiguous), the current token's "bonus" [B, L, H, V] (float32)
    and the output gate g [B, L, D] from the layer's projections of x, ``proj`` [B, L, 3D + R]: the receptance r,
    the key k and the value v, then the down projections of the decay, in-context-learning-rate, gate and (after
    layer 0) value-mix LoRAs, whose up projections are ``w_up``, ``a_up``, ``g_up``, ``v_up`` [D, rank] (``v_up``
    None in layer 0, and ``v_first``, layer 0's value, too). The biases ``w_bias``, ``a_bias``, ``v_bias``, ``k_k``,
    ``k_a``: [D]; ``r_k`` [H, K] (H heads of K).

    w = -W_SCALE sigmoid(up(tanh(w_down)) + w_bias), computed in float32 and returned in k's dtype (bf16 under
    autocast, as fla's layer hands its chunk kernel the decays: half the bytes for the recurrence's four kernels to
    read, and its gradient half to write); the value mixed towards ``v_first`` by
    sigmoid(up(v_down) + v_bias); iclr = sigmoid(up(a_down) + a_bias); kk, the key scaled by ``k_k`` and normalised
    per head, gives a = -kk and b = kk * iclr; the key is scaled by 1 + (iclr - 1) k_a; the bonus is ((r * k * r_k)
    summed over K) * v, with that key and value; g = up(sigmoid(g_down)). With ``positions`` [B, P] (the last
    block's labelled rows) the bonus [B, P, H, V] and g [B, P, D] are those rows' alone. Compiled, this is one
    graph from the projections to the recurrence: proj's gradient is written by the kernels that make its parts'
    gradients (no concatenation of them after), the biases' gradients are sums fused into those kernels, and so is
    the bonus's part of the key's and the value's gradients, which autograd would otherwise add to the recurrence's
    in kernels of their own.
    """
    D = k_k.shape[0]
    H, K = r_k.shape
    ranks = [w_up.shape[1], a_up.shape[1], g_up.shape[1]] + ([] if v_up is None else [v_up.shape[1]])
    r, k, v, w_down, a_down, g_down, *v_down = proj.split([D, D, D] + ranks, -1)
    heads = proj.shape[:2] + (H, K)
    w = -W_SCALE * torch.sigmoid(F.linear(torch.tanh(w_down), w_up).float() + w_bias)
    if v_up is not None:
        v_mix = torch.sigmoid(F.linear(v_down[0], v_up).float() + v_bias)
        v = torch.lerp(v, v_first, v_mix.to(v.dtype))
    a_raw = F.linear(a_down, a_up)
    iclr = torch.sigmoid(a_raw.float() + a_bias).to(a_raw.dtype)
    kk = F.normalize((k * k_k).reshape(heads).float(), dim=-1).to(k.dtype)
    k = (k * (1 + (iclr - 1) * k_a)).view(heads)
    r, v = r.reshape(heads), v.reshape(heads)
    r_out, k_out, v_out = r, k, v
    if positions is not None:  # the bonus and the gate are read out at those rows alone
        r_out, k_out, v_out = rows_at(r, positions), rows_at(k, positions), rows_at(v, positions)
        g_down = rows_at(g_down, positions)
    bonus = (r_out * k_out * r_k).sum(-1, keepdim=True).float() * v_out.float()
    g = F.linear(torch.sigmoid(g_down), g_up)
    return r.contiguous(), w.to(k.dtype).view(heads), k, v.contiguous(), -kk, kk * iclr.view(heads), bonus, g


def read_out(o: torch.Tensor, bonus: torch.Tensor, g: torch.Tensor, norm_weight: torch.Tensor,
             norm_bias: torch.Tensor, eps: float, out_dtype: torch.dtype) -> torch.Tensor:
    """The recurrence's output o [B, L, H, V] -> [B, L, D] in ``out_dtype``, before the output projection: each
    head's o layer-normed (the output GroupNorm, one group per head: ``norm_weight``, ``norm_bias`` [D]), plus the
    current token's ``bonus`` [B, L, H, V] (``recurrence_inputs``), times the output gate ``g`` [B, L, D]. Float32
    math."""
    H, K = o.shape[-2:]
    o = F.layer_norm(o.float(), (K,), eps=eps) * norm_weight.view(H, K) + norm_bias.view(H, K)
    return ((o + bonus).flatten(2) * g.float()).to(out_dtype)


RECURRENCE_INPUTS_COMPILED = Compiled(recurrence_inputs, "RWKV-7's recurrence inputs")
READ_OUT_COMPILED = Compiled(read_out, "RWKV-7's read-out")


def compiled_in_training(compiled: Compiled, *args):
    """``compiled.in_training(*args)``'s output (compiled in a training step on a GPU, else uncompiled);
    ``zoo.kernels.backend.last_backend("rwkv7_layer")`` says which ran."""
    out, was_compiled = compiled.in_training(*args)
    backend.record("rwkv7_layer", "compiled" if was_compiled else backend.NAIVE)
    return out


@register_mixer("rwkv7")
class RWKV7(nn.Module):
    """RWKV-7 time mixing: (B, L, D) -> (B, L, D), fla's ``RWKV7Attention`` (the reference) in zoo's names.

    Initialisation is fla's, which scales with depth: ``n_layers`` is the model's depth (the model passes
    it, like ``layer_idx``); token-shift mixes, the decay bias and the output norm's gain depend on
    ``layer_idx / n_layers``. The output projection starts at zero and the LoRA down projections too,
    as in fla and RWKV-LM.

    Args:
        d_model: D.
        head_dim: K = V per head (64); must divide D.
        decay_rank, iclr_rank, value_rank, gate_rank: LoRA ranks of w, a, v-mix and the output gate;
            None picks fla's rule (``default_rank``: 2.5, 2.5, 1.7 and 5 times sqrt(D), at least 32).
    """

    uses_layer_state = True
    outputs_at_positions = True  # forward(x, layer_state, positions): the read-out and o_proj on those rows alone

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, n_layers: int = 2,
                 head_dim: int = 64, decay_rank: int | None = None, iclr_rank: int | None = None,
                 value_rank: int | None = None, gate_rank: int | None = None):
        super().__init__()
        if head_dim < 1 or d_model % head_dim:
            raise ConfigError("model.mixer_kwargs.head_dim", head_dim, f"a divisor of d_model={d_model}")
        decay_rank = default_rank(d_model, head_dim, 2.5) if decay_rank is None else decay_rank
        iclr_rank = default_rank(d_model, head_dim, 2.5) if iclr_rank is None else iclr_rank
        value_rank = default_rank(d_model, head_dim, 1.7) if value_rank is None else value_rank
        gate_rank = default_rank(d_model, head_dim, 5.0, per_head=False) if gate_rank is None else gate_rank
        for key, rank in (("decay_rank", decay_rank), ("iclr_rank", iclr_rank), ("value_rank", value_rank),
                          ("gate_rank", gate_rank)):
            if not isinstance(rank, int) or rank < 1:
                raise ConfigError(f"model.mixer_kwargs.{key}", rank, "an integer >= 1 or None (fla's rule)")
        D, self.layer_idx, self.head_dim, self.n_heads = d_model, layer_idx, head_dim, d_model // head_dim
        ratio_0_to_1 = layer_idx / max(n_layers - 1, 1)
        ratio_1_to_almost0 = 1.0 - layer_idx / n_layers
        idx = torch.arange(D, dtype=torch.float64)
        linear = idx / (D - 1) - 0.5
        zigzag = ((idx % head_dim) - (head_dim - 1) / 2) / ((head_dim - 1) / 2)
        zigzag = zigzag * zigzag.abs()
        # token-shift mixes of the r, w, k, v, a, g inputs: x + (x_{t-1} - x) * x_*
        for name, exponent in (("x_r", 0.2), ("x_w", 0.9), ("x_k", 0.7), ("x_v", 0.7), ("x_a", 0.9), ("x_g", 0.2)):
            setattr(self, name, nn.Parameter((1 - (idx / D) ** (exponent * ratio_1_to_almost0)).float()))
        # r, k and v's weights (their matmul is the layer's one projection of x, as the LoRAs' down projections)
        self.r_proj = nn.Linear(D, D, bias=False)
        self.k_proj = nn.Linear(D, D, bias=False)
        self.v_proj = nn.Linear(D, D, bias=False)
        self.w_lora = LoRA(D, D, decay_rank)
        self.a_lora = LoRA(D, D, iclr_rank)
        self.g_lora = LoRA(D, D, gate_rank, bias=False)
        self.v_lora = LoRA(D, D, value_rank) if layer_idx > 0 else None
        self.k_k = nn.Parameter((0.71 - 0.1 * linear).float())
        self.k_a = nn.Parameter(torch.full((D,), 1.02))
        self.r_k = nn.Parameter(torch.full((self.n_heads, head_dim), -0.04))
        self.g_norm = nn.GroupNorm(self.n_heads, D, eps=head_dim * 1e-5)
        self.o_proj = Linear(D, D, bias=False)
        with torch.no_grad():
            decay = -6 + 6 * (idx / (D - 1)) ** (1 + ratio_0_to_1 ** 0.3)
            self.w_lora.bias.copy_(decay + 0.5 + 2.5 * zigzag)
            self.a_lora.bias.copy_(-0.19 + 0.3 * zigzag + 0.4 * linear)
            if self.v_lora is not None:
                self.v_lora.bias.copy_(0.73 - 0.4 * linear)
            self.g_norm.weight.fill_(((layer_idx + 1) / n_layers) ** 0.7)
            nn.init.orthogonal_(self.r_proj.weight)
            nn.init.orthogonal_(self.k_proj.weight, gain=0.1)
            nn.init.orthogonal_(self.v_proj.weight)
            nn.init.zeros_(self.o_proj.weight)

    def forward(self, x: torch.Tensor, layer_state: dict | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the
        read-out (output norm, bonus and gate, the gate's up projection included) and the output projection on those
        rows; the projections of x and the recurrence still cover every row."""
        D = x.shape[-1]
        # r, k, v and the LoRAs' down projections, each of its own token-shift mix x + (x_{t-1} - x) * x_*, as one
        # matmul of [x, x_{t-1}] on GPU (the mixes folded into the weights: zoo.kernels.shifted_linear)
        mixes = torch.stack([self.x_r, self.x_w, self.x_k, self.x_v, self.x_a, self.x_g])
        loras = [self.w_lora, self.a_lora, self.g_lora] + ([self.v_lora] if self.v_lora is not None else [])
        proj = shifted_linear(x, mixes, [self.r_proj.weight, self.k_proj.weight, self.v_proj.weight]
                              + [m.down.weight for m in loras], MIX_OF[:len(loras) + 3])
        v_first = v_up = v_bias = None
        if self.v_lora is not None:
            v_up, v_bias = self.v_lora.up.weight, self.v_lora.bias
            v_first = proj[..., 2 * D:3 * D]  # a later layer without layer 0's value mixes its own
            if layer_state is not None:
                v_first = layer_state.setdefault("v_first", v_first)
        r, w, k, v, a, b, bonus, g = compiled_in_training(
            RECURRENCE_INPUTS_COMPILED, proj, self.w_lora.up.weight, self.w_lora.bias, self.a_lora.up.weight,
            self.a_lora.bias, self.g_lora.up.weight, v_first, v_up, v_bias, self.k_k, self.k_a, self.r_k, positions)
        if self.v_lora is None and layer_state is not None:
            layer_state["v_first"] = v.view(x.shape)
        o = rwkv7(r, w, k, v, a, b, w_min=-W_SCALE)
        if positions is not None:
            o = rows_at(o, positions)
        # the output GroupNorm as a LayerNorm over each head's K values, with the per-channel affine after it (PyTorch's
        # GroupNorm backward for its weight and bias was the slowest kernel of this layer's step on an H100); written
        # in the dtype the output projection reads under autocast (no cast kernel there, none for its input's gradient)
        y = compiled_in_training(READ_OUT_COMPILED, o, bonus, g, self.g_norm.weight, self.g_norm.bias,
                                 self.g_norm.eps, matmul_dtype(x) or x.dtype)
        return self.o_proj(y)

    def state_size(self, seq_len: int) -> int:
        """Values per sequence: H (K, V) states plus the previous token for the shift: ``H K^2 + D``."""
        return self.n_heads * self.head_dim ** 2 + self.n_heads * self.head_dim
