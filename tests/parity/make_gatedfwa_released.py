"""Fixtures of the GatedFWA authors' released layer (checkout of ljxw88/nanochat in ``third_party/nanochat``).

``CausalSelfAttentionGated`` of ``nanochat/gpt_gated.py`` with the forgetting gate and a sliding window,
run as released except for its two Triton kernels, which need a GPU: ``GFWA.flash.attention`` and
``nanochat.token_shift.token_shift`` are replaced by the dense PyTorch statements below, and the layer's
``q.device.type == "cuda"`` test (which routes CPU tensors to no attention at all) is removed from its
source before it is compiled. The projections, RoPE, QK norm, gate and shift code are the authors'.

``gatedfwa_released``: 2 heads of 16, window 5, no token shift; ``gatedfwa_released_shift``: the same
with key and value token shift. Each stores the layer's weights under the released names, the input
``x``, ``cos``/``sin`` (float64; the released model rounds them to bf16, a model-level detail), the
output ``y`` for an upstream gradient ``gy``, and the gradients ``grad.x`` and ``grad.<weight name>``.
The layer computes its gate amplitude and shift weights in float32, so the fixtures are float32-exact.
Set ``ZOO_THIRD_PARTY`` to use a checkout elsewhere than ``<repo>/third_party``. Regenerated from nanochat at
b41ed57 (``nanochat/gpt_gated.py`` and ``GFWA/`` last changed in 520d0ce), the fixtures come out the same tensors
as the committed ones.
"""
from __future__ import annotations

import functools
import inspect
import math
import os
import sys
import textwrap
from pathlib import Path

import torch

from fixtures import save_fixture

THIRD_PARTY = Path(os.environ.get("ZOO_THIRD_PARTY", Path(__file__).parents[2] / "third_party"))
D_MODEL, HEADS, WINDOW, BATCH, SEQ_LEN = 32, 2, 5, 2, 12


def dense_forgetting_attention(q, k, v, log_fgate=None, *, head_first=True, sm_scale=None, window_size=None):
    """What ``GFWA.flash.attention`` computes, densely: q, k, v (B, H, T, D), log_fgate (B, H, T);
    logits q_i.k_j * sm_scale + c_i - c_j with c = cumsum(log_fgate), keys i - window < j <= i."""
    assert head_first
    T = q.shape[2]
    s = torch.einsum("bhid,bhjd->bhij", q, k) * sm_scale
    if log_fgate is not None:
        c = torch.cumsum(log_fgate.to(q.dtype), dim=-1)
        s = s + c[..., :, None] - c[..., None, :]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    inside = (j <= i) & (j > i - (window_size or T + 1))
    return torch.softmax(s.masked_fill(~inside, float("-inf")), dim=-1) @ v


def dense_token_shift(x, prev_weight, curr_weight):
    """What ``nanochat.token_shift.token_shift`` computes: x (B, T, H, D), weights (B, T, H)."""
    x_prev = torch.nn.functional.pad(x, (0, 0, 0, 0, 1, 0))[:, :-1]
    return x_prev * prev_weight[..., None] + x * curr_weight[..., None]


def rotary(seq_len: int, head_dim: int, base: float = 10000.0):
    """nanochat's ``_precompute_rotary_embeddings`` in float64: cos, sin (1, T, 1, head_dim / 2)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    return freqs.cos()[None, :, None, :], freqs.sin()[None, :, None, :]


@functools.cache
def load_layer_class():
    sys.path.insert(0, str(THIRD_PARTY / "nanochat"))
    import nanochat.gpt_gated as gpt_gated
    import nanochat.token_shift as token_shift

    gpt_gated.flash_attention = dense_forgetting_attention
    token_shift.token_shift = dense_token_shift
    cls = gpt_gated.CausalSelfAttentionGated
    source = textwrap.dedent(inspect.getsource(cls.forward))
    cpu_check = ' and q.device.type == "cuda"'
    assert source.count(cpu_check) == 1, "the released forward changed: revisit this patch"
    namespace: dict = {}
    exec(compile(source.replace(cpu_check, ""), inspect.getsourcefile(cls), "exec"), gpt_gated.__dict__, namespace)
    cls.forward = namespace["forward"]
    return gpt_gated


def record(shift: bool, seed: int) -> dict[str, torch.Tensor]:
    gpt_gated = load_layer_class()
    config = gpt_gated.GPTGatedConfig(sequence_len=SEQ_LEN, n_layer=1, n_head=HEADS, n_kv_head=HEADS, n_embd=D_MODEL,
                                      window_size=WINDOW, use_forgetting_gate=True, use_k_shift=shift, use_v_shift=shift)
    layer = gpt_gated.CausalSelfAttentionGated(config, layer_idx=0).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # random everything (the released init zeroes c_proj and weight_lambda)
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) / math.sqrt(p.shape[-1]))
        layer.fgate_proj.bias.add_(2.0)
    x = torch.randn(BATCH, SEQ_LEN, D_MODEL, generator=g, dtype=torch.float64, requires_grad=True)
    gy = torch.randn(BATCH, SEQ_LEN, D_MODEL, generator=g, dtype=torch.float64)
    cos, sin = rotary(SEQ_LEN, D_MODEL // HEADS)
    y = layer(x, (cos, sin), kv_cache=None)
    y.backward(gy)
    out = {f"weight.{n}": p for n, p in layer.named_parameters()}
    out |= {f"grad.{n}": p.grad for n, p in layer.named_parameters()}
    return out | {"x": x, "y": y, "gy": gy, "grad.x": x.grad, "cos": cos, "sin": sin}


def make() -> None:
    save_fixture("gatedfwa_released", record(shift=False, seed=0))
    save_fixture("gatedfwa_released_shift", record(shift=True, seed=1))
