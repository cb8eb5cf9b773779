"""Fixtures of Zoology's non-attention mixers (Hyena, BaseConv, Based's Taylor attention, RWKV-4).

Reference: Zoology at commit dbcb60d, checked out (git-ignored) at ``third_party/zoology`` of the main
repository, or at ``$ZOOLOGY``; needs ``einops``, ``pydantic`` and ``opt_einsum``. Runs on CPU in float32.

Zoology's RWKV-4 runs WKV through a CUDA extension that it compiles at import; here the extension's
loader is stubbed and WKV is evaluated from its definition (the CUDA kernel's forward, written as the
explicit sums below, in float64) so that autograd gives the gradients.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from unittest import mock

import torch

from capture import capture, perturb
from fixtures import save_fixture

ZOOLOGY = Path(os.environ.get("ZOOLOGY", Path(__file__).resolve().parents[2] / "third_party" / "zoology"))
B, L, D = 2, 24, 16


def import_zoology():
    sys.path.insert(0, str(ZOOLOGY))
    # rwkv.py builds its CUDA WKV at import; zoology.utils imports wandb, which no mixer uses
    with mock.patch("torch.utils.cpp_extension.load", return_value=None), \
            mock.patch.dict(sys.modules, {"wandb": mock.MagicMock()}):
        from zoology.mixers import base_conv, based, hyena, rwkv
    rwkv.RUN_CUDA = wkv_definition
    return base_conv, based, hyena, rwkv


def wkv_definition(Bt, T, C, time_decay, time_first, k, v):
    """WKV as Zoology's CUDA kernel defines it, with ``w = -exp(time_decay)``, ``u = time_first``::

        y_t = (sum_{i<t} e^{(t-1-i) w + k_i} v_i + e^{u + k_t} v_t) / (sum_{i<t} e^{(t-1-i) w + k_i} + e^{u + k_t})
    """
    w, u = -torch.exp(time_decay.double()), time_first.double()
    k, v = k.double(), v.double()
    t = torch.arange(T, dtype=torch.float64)
    lag = (t[:, None] - 1 - t[None, :])  # (t, i): t-1-i
    logits = (lag[..., None] * w + k[:, None, :, :]).masked_fill((lag < 0)[None, ..., None], -math.inf)  # (B, t, i, C)
    diag = (u + k)[:, :, None, :]  # the current token's own term, e^{u + k_t}
    logits = torch.cat([logits, diag], dim=2)
    values = torch.cat([v[:, None].expand(Bt, T, T, C), v[:, :, None]], dim=2)
    return (torch.softmax(logits, dim=2) * values).sum(2).float()


def make() -> None:
    base_conv, based, hyena, rwkv = import_zoology()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, L, D, generator=gen)

    torch.manual_seed(1)
    layer = hyena.Hyena(d_model=D, l_max=32)
    perturb(layer)
    tensors = capture(layer, x)
    tensors["init.z5"] = hyena.PositionalEmbedding(5, 32).z[0]  # positional features with two bands
    save_fixture("zoology_hyena", tensors)

    torch.manual_seed(2)
    layer = base_conv.BaseConv(d_model=D, l_max=32, kernel_size=3)
    perturb(layer)
    save_fixture("zoology_base_conv", capture(layer, x))

    torch.manual_seed(3)  # figure 2's Based layer, with two heads to pin the head layout
    layer = based.Based(d_model=D, l_max=32, feature_dim=8, num_key_value_heads=2, num_heads=2,
                        feature_name="taylor_exp", train_view="quadratic")
    perturb(layer)
    save_fixture("zoology_based", capture(layer, x))

    tensors = {}
    for n_layer, layer_idx in ((2, 0), (2, 1), (4, 3)):  # initialisation depends on depth
        layer = rwkv.RWKVTimeMixer(l_max=32, d_model=D, n_layer=n_layer, layer_idx=layer_idx)
        for name in ("time_decay", "time_first", "time_mix_k", "time_mix_v", "time_mix_r"):
            tensors[f"init{n_layer}.{layer_idx}.{name}"] = getattr(layer, name).detach().flatten()
    torch.manual_seed(4)
    layer = rwkv.RWKVTimeMixer(l_max=32, d_model=D, n_layer=2, layer_idx=1)
    perturb(layer)
    tensors.update(capture(layer, x))
    save_fixture("zoology_rwkv", tensors)
