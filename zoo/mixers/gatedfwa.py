"""GatedFWA: gated sliding-window attention with a cumulative decay bias (arXiv 2512.07782).

For x (B, L, D), H heads of size d and window w, both variants compute
    q, k, v = x W_q, x W_k, x W_v                            (B, L, H, d), RoPE on q, k if positions=rope
    q, k = QKNorm(q), QKNorm(k)
    h = x W_g + b_g,  beta = 1 + elu(x W_beta)               (B, L, H); W_beta starts at zero (beta = 1)
    alpha = softplus(beta * h) / (beta + eps),  u = cumsum(-alpha) over time     (``gate_cumsum``)
    o_i = sum_{i-w < j <= i} softmax_j(q_i.k_j / sqrt(d) + u_i - u_j) v_j        (``gated_window_attention``)
    y = W_o(OutGate(o))
The decay u_i - u_j <= 0 grows with distance, so old keys fade at a learned, input-dependent rate.

``variant="paper"`` is the layer of the paper's section 3.3: QKNorm = RMSNorm with learnable gains
(starting at 1), OutGate(o) = RMSNorm_head(o) * silu(x W_z) (per-head norm, swish gate), eps = 1e-6,
initial decays alpha spread over [1e-3, 1e-1] across heads.

``variant="released"`` is the authors' released layer (nanochat ``CausalSelfAttentionGated`` with the
forgetting gate): QKNorm = parameter-free RMSNorm applied after RoPE, no output norm or gate
(OutGate(o) = o), no projection biases, eps = 1e-3, and the log-sigmoid gate
``log f = logsigmoid(lambda * g) / (lambda + 1e-3)`` with ``lambda = 1 + elu(x W_lambda)`` and
``g = x W_f + b_f``, ``b_f = 2``. Since ``logsigmoid(z) = -softplus(-z)`` this is the decay above with
``h = -g``: zoo keeps one sign, so the released ``(W_f, b_f)`` are ``(-W_g, -b_g)`` here (``b_g = -2``,
alpha starting at softplus(-2) = 0.127 per token). ``k_shift`` / ``v_shift`` add the released layer's
optional token shift (``ShiftLinear``): k_t <- a_t k_t + (1 - a_t) k_{t-1}, a = sigmoid(x W_a) per head.
The released model uses RoPE (``model.positions: rope``); its model-level init (nanochat's) is not
reproduced: zoo's ``model.init`` applies to every mixer alike.

Individual switches override the variant (for ablations): ``qk_norm`` ("gain", "plain", "none"),
``output_gate``, ``decay`` (False: u = None, plain sliding-window attention with the other parts),
``alpha_init``, ``eps``, ``qk_gain_init`` (the starting value of the "gain" norm's gains; above 1 it
raises the starting logit temperature, which bounds logits at gain^2 * sqrt(d)). The gate bias b_g and W_beta are plain parameters, not nn.Linear parts, so
they keep their initial values under ``model.init: zoology`` (as Mamba's dt bias does in Zoology).

The default is ``variant="paper"``, chosen by experiment: trained over the MQAR grid's learning rates,
``qk_norm="plain"`` solved some cells the published layer stalls in and stalled in others, the paper's
N=512, d=64 cell among them (results/FIDELITY.md, section 3).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.kernels.gatedfwa import gate_cumsum, gated_window_attention
from zoo.kernels.layer_norm import RMSNorm
from zoo.kernels.linear import Linear
from zoo.kernels.linear.split import linear_parts
from zoo.kernels.rows import rows_at
from zoo.errors import ConfigError
from zoo.mixers.attention import SlidingWindowAttention
from zoo.mixers.registry import register_mixer
from zoo.rope import apply_rope

QK_NORMS = ("gain", "plain", "none")
VARIANTS = {
    "paper": dict(qk_norm="gain", output_gate=True, eps=1e-6, alpha_init=None),
    "released": dict(qk_norm="plain", output_gate=False, eps=1e-3, alpha_init=float(F.softplus(torch.tensor(-2.0)))),
}


class TokenShift(nn.Module):
    """The released layer's token shift of one projection: y_t = a_t y_t + (1 - a_t) y_{t-1}, y_{-1} = 0.

    Args:
        d_model: input width D; ``a = sigmoid(x W_a)`` has one weight per head (``proj``, applied by the layer
            with its other projections of x).
    Shapes: logits x W_a (B, L, H), y (B, L, H, d) -> (B, L, H, d).
    """

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.proj = nn.Linear(d_model, num_heads, bias=False)

    def forward(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.sigmoid(logits.float())[..., None]
        prev = F.pad(y, (0, 0, 0, 0, 1, 0))[:, :-1]
        return (a * y + (1 - a) * prev).to(y.dtype)


@register_mixer("gatedfwa")
class GatedFWA(SlidingWindowAttention):
    """GatedFWA layer (see the module docstring for the formula and the two variants).

    Args:
        variant: "paper" or "released"; sets the defaults of the switches below.
        qk_norm: "gain" (RMSNorm, learnable gains from 1), "plain" (no parameters) or "none".
        output_gate: per-head RMSNorm of o times silu(x W_z) before W_o.
        decay: False drops the decay bias (u = None).
        alpha_init: initial per-token decay of every head; None spreads heads over [1e-3, 1e-1].
        eps: of the gate normalisation (beta + eps).
        k_shift, v_shift: the released layer's token shift of keys / values.
        qk_gain_init: starting value of the QK-norm gains (qk_norm="gain"); 1 as published.
    """

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 2,
                 bias: bool = False, positions: str = "learned", window: int | None = None,
                 variant: str = "paper", qk_norm: str | None = None, output_gate: bool | None = None,
                 decay: bool = True, alpha_init: float | None = None, eps: float | None = None,
                 k_shift: bool = False, v_shift: bool = False, qk_gain_init: float = 1.0):
        super().__init__(d_model, layer_idx, max_seq_len, num_heads, bias, positions, window)
        if variant not in VARIANTS:
            raise ConfigError("model.mixer_kwargs.variant", variant, list(VARIANTS))
        given = dict(qk_norm=qk_norm, output_gate=output_gate, eps=eps, alpha_init=alpha_init)
        opts = {k: VARIANTS[variant][k] if v is None else v for k, v in given.items()}
        if opts["qk_norm"] not in QK_NORMS:
            raise ConfigError("model.mixer_kwargs.qk_norm", qk_norm, list(QK_NORMS))
        if opts["alpha_init"] is not None and not opts["alpha_init"] > 0:
            raise ConfigError("model.mixer_kwargs.alpha_init", alpha_init, "a number > 0 or null")
        self.variant, self.qk_norm, self.eps, self.decay = variant, opts["qk_norm"], opts["eps"], decay
        self.q_norm, self.k_norm = (self._make_qk_norm(self.qk_norm, self.head_dim) for _ in range(2))
        if self.qk_norm == "gain":
            for norm in (self.q_norm, self.k_norm):
                nn.init.constant_(norm.weight, qk_gain_init)
        elif qk_gain_init != 1.0:
            raise ConfigError("model.mixer_kwargs.qk_gain_init", qk_gain_init, f"1.0 with qk_norm={self.qk_norm!r} (no gains)")
        self.k_shift = TokenShift(d_model, num_heads) if k_shift else None
        self.v_shift = TokenShift(d_model, num_heads) if v_shift else None
        if decay:
            self.gate = nn.Linear(d_model, num_heads, bias=False)
            nn.init.normal_(self.gate.weight, std=0.02)  # small: decays start nearly input-independent
            alpha0 = torch.logspace(-3, -1, num_heads) if opts["alpha_init"] is None else \
                torch.full((num_heads,), float(opts["alpha_init"]))
            self.gate_bias = nn.Parameter(torch.log(torch.expm1(alpha0)))  # softplus(b_g) = alpha0
            self.beta_proj = nn.Parameter(torch.zeros(d_model, num_heads))  # released: weight_lambda
        if opts["output_gate"]:
            self.out_gate = Linear(d_model, d_model, bias=bias)
            self.o_norm = RMSNorm(self.head_dim)
        else:
            self.out_gate = None

    @staticmethod
    def _make_qk_norm(kind: str, head_dim: int) -> nn.Module:
        if kind == "none":
            return nn.Identity()
        return RMSNorm(head_dim, elementwise_affine=kind == "gain")

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D) (the
        model's last block): those K queries attend through ``attend_at`` (``attention_at_rows``) within the window,
        with the decay as a bias of each key's logits (-u_j: the query's own u_i shifts its whole softmax row, which
        changes nothing); the output gate and the output projection run on K rows.

        Every projection of x (q, k, v; the gate and its temperature; the output gate; the token shifts' mixes) is
        one ``linear_parts`` call: x cast once, its gradient summed inside the matmuls."""
        B, L, _ = x.shape
        layers = [(self.qkv.weight, self.qkv.bias)]
        if self.decay:
            layers += [(self.gate.weight, None), (self.beta_proj.t(), None)]
        if self.out_gate is not None:
            layers.append((self.out_gate.weight, self.out_gate.bias))
        layers += [(shift.proj.weight, None) for shift in (self.k_shift, self.v_shift) if shift is not None]
        parts = iter(linear_parts(x, *zip(*layers)))
        q, k, v = next(parts).view(B, L, 3, self.num_heads, self.head_dim).unbind(2)
        h, beta = (next(parts), next(parts)) if self.decay else (None, None)
        z = next(parts) if self.out_gate is not None else None
        if self.k_shift is not None:
            k = self.k_shift(next(parts), k)
        if self.v_shift is not None:
            v = self.v_shift(next(parts), v)
        if self.rope:
            q, k = apply_rope(q), apply_rope(k)
        u = gate_cumsum(h + self.gate_bias, 1 + F.elu(beta), eps=self.eps) if self.decay else None
        if positions is None:
            q, k = self.q_norm(q), self.k_norm(k)
            o = gated_window_attention(q, k, v, u, self.window)
        else:
            q, k, z = self.q_norm(rows_at(q, positions)), self.k_norm(k), z if z is None else rows_at(z, positions)
            # the decay u_i - u_j without u_i, which is constant along a query's softmax row
            o = self.attend_at(q, k, v, positions, None if u is None else -u)
        if z is not None:
            o = self.o_norm(o, z.view_as(o))  # RMSNorm_head(o) * silu(x W_z), one fused call
        return self.out_proj(o.flatten(2))

    def state_size(self, seq_len: int) -> int:
        """Values kept after ``seq_len`` tokens: keys, values and one decay prefix u_j per head for the
        last ``window`` tokens, plus the previous token's unshifted projection for each token shift."""
        cached = min(seq_len, self.window)
        per_token = 2 * self.num_heads * self.head_dim + (self.num_heads if self.decay else 0)
        shifts = (self.k_shift is not None) + (self.v_shift is not None)
        return cached * per_token + shifts * self.num_heads * self.head_dim
