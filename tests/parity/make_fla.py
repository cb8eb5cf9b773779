"""Fixtures of flash-linear-attention's layers: ``RWKV7Attention`` and ``Mamba2`` (fla 0.6.0).

Reference: ``pip install --no-deps fla-core==0.6.0 flash-linear-attention==0.6.0``. fla's layers call
Triton kernels, which do not run on a CPU; each is replaced here by fla's own PyTorch reference of the
same op (``token_shift_ref``, ``torch_addcmul_rwkv7``, ``k_update_ref``, ``gate_output_correction_ref``,
``dplr_recurrence`` for ``chunk_rwkv7``, ``rms_norm_ref``; ``nn.SiLU`` for its Triton swish), and the layer code around them runs as
released. ``transformers`` (imported by fla for logging, activations and typing only) is stubbed.
Runs on CPU in float32.
"""
from __future__ import annotations

import sys
import types
from unittest import mock

import torch
from torch import nn

from capture import capture, perturb
from fixtures import save_fixture

B, L, D = 2, 16, 16


def stub_transformers() -> None:
    activations = types.ModuleType("transformers.activations")
    activations.ACT2FN = {"silu": nn.SiLU()}
    for name in ("transformers", "transformers.utils", "transformers.processing_utils", "transformers.modeling_utils"):
        sys.modules.setdefault(name, mock.MagicMock())
    sys.modules.setdefault("transformers.activations", activations)


def use_reference_norms() -> None:
    """fla's Triton ``rms_norm`` (``RMSNorm``) and ``rms_norm_gated`` (``FusedRMSNormGated``: norm, weight, then
    times swish(gate)) replaced by fla's PyTorch references, for the layers that use them."""
    from fla.modules.norm import fused_norm_gate, layernorm, layernorm_gated

    def rms_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, **_):
        return layernorm.rms_norm_ref(x, weight, bias, residual=residual, eps=eps, prenorm=prenorm, upcast=True)

    def rms_norm_gated(x, g, weight, bias, activation="swish", residual=None, eps=1e-5, prenorm=False, **_):
        assert activation in ("swish", "silu") and residual is None and not prenorm
        return layernorm_gated.rms_norm_ref(x, weight, bias, z=g, eps=eps, norm_before_gate=True, upcast=True)

    layernorm.rms_norm = rms_norm
    fused_norm_gate.rms_norm_gated = rms_norm_gated


def import_fla():
    stub_transformers()
    from fla.layers import mamba2, rwkv7
    from fla.modules import token_shift as ts
    from fla.modules.norm import layernorm_gated
    from fla.ops.generalized_delta_rule.dplr.naive import dplr_recurrence
    from fla.ops.rwkv7 import fused_addcmul, fused_k_update, gate_output_correction

    def chunk_rwkv7(r, w, k, v, a, b, scale, initial_state=None, **_):
        """(B, T, H, K) in, as fla's kernel; dplr_recurrence wants (B, H, T, K) and scales q by K^-0.5."""
        to_heads = [t.transpose(1, 2) for t in (r * scale * r.shape[-1] ** 0.5, k, v, a, b, w)]
        o, state = dplr_recurrence(*to_heads, initial_state=initial_state)
        return o.transpose(1, 2), state

    rwkv7.token_shift = lambda x, cu_seqlens, output_cache, cache: (ts.token_shift_ref(x, cu_seqlens), None)
    rwkv7.fused_addcmul_rwkv7 = fused_addcmul.torch_addcmul_rwkv7
    rwkv7.fused_k_rwkv7 = fused_k_update.k_update_ref
    rwkv7.gate_output_correction = gate_output_correction.gate_output_correction_ref
    rwkv7.chunk_rwkv7 = chunk_rwkv7
    layernorm_gated.rmsnorm_fn = layernorm_gated.rms_norm_ref
    return rwkv7, mamba2


def make() -> None:
    rwkv7, mamba2 = import_fla()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, L, D, generator=gen)

    # RWKV-7: layer 1 of 2, whose values mix with layer 0's (v_first); capture the pair as one module
    torch.manual_seed(1)
    ranks = dict(decay_low_rank_dim=8, gate_low_rank_dim=8, a_low_rank_dim=8, v_low_rank_dim=8)
    pair = nn.ModuleList(rwkv7.RWKV7Attention(hidden_size=D, head_dim=8, layer_idx=i, num_hidden_layers=2, **ranks)
                         for i in range(2))
    tensors = {f"init.{i}.{n}": p.detach().clone() for i, layer in enumerate(pair)
               for n, p in layer.named_parameters()}
    perturb(pair)

    def two_layers(m, inp):
        y0, _, _, v_first = m[0](inp)
        y1, _, _, _ = m[1](inp, v_first=v_first)
        return torch.cat([y0, y1], dim=-1)

    tensors.update(capture(pair, x, forward=two_layers))
    save_fixture("fla_rwkv7", tensors)

    torch.manual_seed(2)
    layer = mamba2.Mamba2(hidden_size=D, head_dim=8, state_size=8, expand=2, chunk_size=8, layer_idx=0)
    layer.act = nn.SiLU()  # fla's Triton swish, same function
    perturb(layer)
    save_fixture("fla_mamba2", capture(layer, x, forward=lambda m, inp: m(inp)[0]))
