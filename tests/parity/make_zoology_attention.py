"""Fixtures of Zoology's attention layers (Zoology at commit dbcb60d, checkout in ``third_party/zoology``).

``zoology_mha``: ``zoology.mixers.attention.MHA`` (the figure-2 attention baseline), 2 heads, biases.
``zoology_slide_attn``: ``zoology.mixers.slide_attn.SlidingAttn`` (sliding-window attention of the
based paper's figures), block_size 5. Both at dropout 0 (dropout is random, not comparable).
Each stores the layer's weights under Zoology's names, the input ``x``, the output ``y`` for an
upstream gradient ``gy``, and the gradients ``grad.x`` and ``grad.<weight name>``.
Set ``ZOO_THIRD_PARTY`` to use checkouts elsewhere than ``<repo>/third_party``.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from fixtures import save_fixture

THIRD_PARTY = Path(os.environ.get("ZOO_THIRD_PARTY", Path(__file__).parents[2] / "third_party"))
D_MODEL, BATCH, SEQ_LEN = 32, 2, 12


def record(layer: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Weights, input, output and gradients of ``layer`` on a random input (float64)."""
    layer = layer.double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # random biases too: zero biases would not test them
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
    x = torch.randn(BATCH, SEQ_LEN, D_MODEL, generator=g, dtype=torch.float64, requires_grad=True)
    gy = torch.randn(BATCH, SEQ_LEN, D_MODEL, generator=g, dtype=torch.float64)
    y = layer(x)
    y.backward(gy)
    out = {f"weight.{n}": p for n, p in layer.named_parameters()}
    out |= {f"grad.{n}": p.grad for n, p in layer.named_parameters()}
    return out | {"x": x, "y": y, "gy": gy, "grad.x": x.grad}


def make() -> None:
    sys.path.insert(0, str(THIRD_PARTY / "zoology"))
    from zoology.mixers.attention import MHA
    from zoology.mixers.slide_attn import SlidingAttn

    save_fixture("zoology_mha", record(MHA(D_MODEL, num_heads=2, bias=True, dropout=0.0).eval(), seed=0))
    save_fixture("zoology_slide_attn", record(SlidingAttn(D_MODEL, block_size=5, dropout=0.0).eval(), seed=1))
