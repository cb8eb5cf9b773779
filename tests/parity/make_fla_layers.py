"""Fixtures of flash-linear-attention's gated linear layers: ``GatedLinearAttention``, ``MultiScaleRetention``
and ``HGRN2Attention`` (fla 0.6.0).

Reference: ``pip install --no-deps fla-core==0.6.0 flash-linear-attention==0.6.0``. The layers call Triton
kernels, which do not run on a CPU; each is replaced here by fla's own PyTorch reference of the same op, and the
layer code around them runs as released:

* ``fused_recurrent_gla`` (what the GLA and HGRN2 layers call at T <= 64) by ``naive_recurrent_gla``;
* ``chunk_retention`` (what the retention layer calls while gradients are on) by ``naive_retention``;
* the Triton norms of ``RMSNorm`` and ``FusedRMSNormGated`` by fla's references (``make_fla.use_reference_norms``),
  and HGRN2's fused ``rms_norm_linear`` by ``layernorm.rms_norm_ref`` followed by ``F.linear``;
* the Triton ``rotary_embedding`` of ``RotaryEmbedding`` by ``rotary_embedding_ref`` on the positions in use;
* HGRN2's Triton ``swish`` by ``F.silu`` (the same function).

``transformers`` is stubbed as in ``make_fla.py``. Runs on CPU in float32.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from capture import capture, perturb
from fixtures import save_fixture
from make_fla import stub_transformers, use_reference_norms

B, L, D = 2, 16, 16


def import_fla():
    stub_transformers()
    from fla.layers import gla, hgrn2, multiscale_retention
    from fla.modules.norm import layernorm
    from fla.modules.rotary import ops as rotary_ops
    from fla.ops.gla.naive import naive_recurrent_gla
    from fla.ops.retention.naive import naive_retention

    def fused_recurrent_gla(q, k, v, gk, initial_state=None, output_final_state=False, **_):
        return naive_recurrent_gla(q, k, v, gk, initial_state, output_final_state)

    def chunk_retention(q, k, v, initial_state=None, output_final_state=False, **_):
        """(B, T, H, K) in and out, as fla's kernel; naive_retention works on (B, H, T, K)."""
        assert initial_state is None and not output_final_state
        heads_first = lambda t: t.transpose(1, 2)  # noqa: E731
        return heads_first(naive_retention(*map(heads_first, (q, k, v)))), None

    def rms_norm_linear(x, norm_weight, norm_bias, linear_weight, linear_bias, eps=1e-5, **_):
        return F.linear(layernorm.rms_norm_ref(x, norm_weight, norm_bias, eps=eps, upcast=True), linear_weight,
                        linear_bias)

    def rotary_embedding(x, cos, sin, interleaved=False, seqlen_offsets=0, **_):
        positions = slice(seqlen_offsets, seqlen_offsets + x.shape[1])
        return rotary_ops.rotary_embedding_ref(x, cos[positions], sin[positions], interleaved)

    gla.fused_recurrent_gla = hgrn2.fused_recurrent_gla = fused_recurrent_gla
    multiscale_retention.chunk_retention = chunk_retention
    use_reference_norms()
    hgrn2.rms_norm_linear = rms_norm_linear
    hgrn2.swish = F.silu
    rotary_ops.rotary_embedding = rotary_embedding
    return gla, multiscale_retention, hgrn2


def make() -> None:
    gla, retention, hgrn2 = import_fla()
    x = torch.randn(B, L, D, generator=torch.Generator().manual_seed(0))
    first = lambda m, inp: m(inp)[0]  # noqa: E731  fla's layers return (output, attentions, cache)

    torch.manual_seed(1)
    layer = gla.GatedLinearAttention(hidden_size=D, num_heads=2, expand_k=0.5, expand_v=1.0, gate_low_rank_dim=4)
    perturb(layer)
    save_fixture("fla_gla_layer", capture(layer, x, forward=first))

    torch.manual_seed(2)
    layer = retention.MultiScaleRetention(hidden_size=D, num_heads=2, expand_k=1.0, expand_v=2.0)
    perturb(layer)
    save_fixture("fla_retnet_layer", capture(layer, x, forward=first))

    torch.manual_seed(3)
    layer = hgrn2.HGRN2Attention(hidden_size=D, expand_ratio=8)
    perturb(layer)
    save_fixture("fla_hgrn2_layer", capture(layer, x, forward=first))
