"""Fixtures of flash-linear-attention's layers ``DeltaNet`` and ``GatedDeltaNet`` (fla 0.6.0), with and
without ``allow_neg_eigval``.

Reference: ``pip install --no-deps fla-core==0.6.0 flash-linear-attention==0.6.0``, then
``python tests/parity/make_fixtures.py fla_deltanet``. fla's layers call Triton kernels, which do not run on
a CPU; each is replaced here, and the layer code around them runs as released:

* ``chunk_delta_rule`` / ``fused_recurrent_delta_rule`` (``fla.layers.delta_net``): fla's own reference
  ``fla.ops.delta_rule.naive.delta_rule_recurrence`` ([B, H, T, K], q scaled by K^-1/2 inside).
* ``chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule`` (``fla.layers.gated_deltanet``): fla's
  references ``fla.ops.gated_delta_rule.gate.naive_gdn_gate`` for the in-kernel gate
  (``use_gate_in_kernel``: -exp(A_log) softplus(g + dt_bias)) and
  ``fla.ops.gated_delta_rule.naive.naive_recurrent_gated_delta_rule`` for the recurrence; the in-kernel
  beta sigmoid (``fused_beta_sigmoid``, times 2 under ``allow_neg_eigval``) as plain ``sigmoid``.
* ``use_qk_l2norm_in_kernel`` (fla's Triton ``l2norm_fwd``, no reference in fla): the same math in plain
  PyTorch, x / sqrt(sum(x^2) + 1e-6).
* ``causal_conv1d`` (behind ``ShortConvolution`` and the layer's fused q/k/v convolution; no reference in
  fla): plain ``F.conv1d`` on the left-padded input, plus bias, then silu, the Triton kernel's math.
* ``RMSNorm``'s and ``FusedRMSNormGated``'s Triton norms: fla's PyTorch references (``make_fla.use_reference_norms``).

``transformers`` (imported by fla for logging, activations and typing only) is stubbed. CPU, float32.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from capture import capture, perturb
from fixtures import save_fixture
from make_fla import stub_transformers, use_reference_norms

B, L, D, H, K = 2, 16, 16, 2, 8


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """fla's Triton ``l2norm_fwd``: x * rsqrt(sum(x^2) + eps) over the last axis."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


def causal_conv1d(x, weight, bias=None, residual=None, initial_state=None, output_final_state=False,
                  activation=None, cu_seqlens=None, **_):
    """fla's ``causal_conv1d``: x [B, T, D], weight [D, W]; y_t = sum_w weight[:, w] x_{t-W+1+w} + bias."""
    assert residual is None and initial_state is None and cu_seqlens is None and not output_final_state
    W = weight.shape[-1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (W - 1, 0)), weight.unsqueeze(1), bias, groups=x.shape[-1])
    y = y.transpose(1, 2)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    return y, None


def import_fla():
    stub_transformers()
    from fla.layers import delta_net, gated_deltanet
    from fla.modules.causal_conv1d import ops as conv_ops
    from fla.ops.delta_rule.naive import delta_rule_recurrence
    from fla.ops.gated_delta_rule.gate import naive_gdn_gate
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

    def delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                   use_qk_l2norm_in_kernel=False, **_):
        """(B, T, H, K) in, as fla's kernels; delta_rule_recurrence wants (B, H, T, K) and scales q by K^-0.5."""
        assert initial_state is None and cu_seqlens is None and not output_final_state
        if use_qk_l2norm_in_kernel:
            q, k = l2norm(q), l2norm(k)
        if scale is not None:
            q = q * (scale * q.shape[-1] ** 0.5)
        o, _ = delta_rule_recurrence(*(t.transpose(1, 2) for t in (q, k, v, beta)), output_final_state=False)
        return o.transpose(1, 2), None

    def gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
                         cu_seqlens=None, use_gate_in_kernel=False, A_log=None, dt_bias=None, **_):
        """fla's chunk / fused-recurrent gated delta rule with the in-kernel options done beforehand."""
        assert initial_state is None and cu_seqlens is None and not output_final_state
        if use_qk_l2norm_in_kernel:
            q, k = l2norm(q), l2norm(k)
        if use_beta_sigmoid_in_kernel:
            beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
        if use_gate_in_kernel:
            g = naive_gdn_gate(g, A_log, dt_bias)
        return naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=scale)[0], None

    delta_net.chunk_delta_rule = delta_net.fused_recurrent_delta_rule = delta_rule
    gated_deltanet.chunk_gated_delta_rule = gated_deltanet.fused_recurrent_gated_delta_rule = gated_delta_rule
    conv_ops.causal_conv1d = gated_deltanet.causal_conv1d = causal_conv1d
    use_reference_norms()
    return delta_net, gated_deltanet


def make() -> None:
    delta_net, gated_deltanet = import_fla()
    x = torch.randn(B, L, D, generator=torch.Generator().manual_seed(0))
    layer_out = lambda m, inp: m(inp)[0]  # noqa: E731  fla's layers return (o, attentions, cache)

    for seed, (name, neg) in enumerate([("fla_deltanet_layer", False), ("fla_deltanet_neg_layer", True)]):
        torch.manual_seed(seed)
        layer = delta_net.DeltaNet(hidden_size=D, expand_k=1.0, expand_v=1.0, num_heads=H, use_beta=True,
                                   use_gate=False, use_short_conv=True, conv_size=4, conv_bias=False,
                                   allow_neg_eigval=neg, qk_activation="silu", qk_norm="l2", layer_idx=0)
        perturb(layer)
        save_fixture(name, capture(layer, x, forward=layer_out))

    for seed, (name, neg) in enumerate([("fla_gated_deltanet_layer", False),
                                        ("fla_gated_deltanet_neg_layer", True)], start=2):
        torch.manual_seed(seed)
        layer = gated_deltanet.GatedDeltaNet(hidden_size=D, expand_v=2.0, head_dim=K, num_heads=H, use_gate=True,
                                             use_short_conv=True, allow_neg_eigval=neg, conv_size=4,
                                             conv_bias=False, layer_idx=0)
        perturb(layer)
        save_fixture(name, capture(layer, x, forward=layer_out))
