"""Fixture of Zoology's whole language model (Zoology at commit dbcb60d, checkout in ``third_party/zoology``).

``zoology_lm``: ``zoology.model.LanguageModel`` as its MQAR configs build it (``TransformerBlock``, a
``torch.nn.Identity`` state mixer, learned positions, tied head), 2 layers of ``SlidingAttn`` (block_size 5, one
head, biases), d_model 32, vocabulary 40, 12 positions, no dropout. Every parameter (norms and biases included) is
redrawn at random, so none is at an identity value. Stored: the weights under Zoology's names, the ids, the logits
for an upstream gradient ``glogits`` and every parameter's gradient ``grad.<name>``.

Zoology's ``model.py`` imports ``torchvision.ops.StochasticDepth``, which at Zoology's default ``drop_path=0``
returns its input, and ``zoology.utils`` imports ``wandb`` for logging. Where either is not installed, ``make``
supplies a stand-in (a StochasticDepth that checks p == 0 and returns its input; an empty wandb module), since
neither reaches these numbers. Set ``ZOO_THIRD_PARTY`` to use checkouts elsewhere than ``<repo>/third_party``.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import torch

from fixtures import save_fixture

THIRD_PARTY = Path(os.environ.get("ZOO_THIRD_PARTY", Path(__file__).parents[2] / "third_party"))
VOCAB, D_MODEL, LAYERS, SEQ_LEN, BATCH, BLOCK_SIZE = 40, 32, 2, 12, 2, 5


class _IdentityDepth(torch.nn.Module):
    """torchvision's StochasticDepth at p = 0: the identity."""

    def __init__(self, p: float, mode: str):
        super().__init__()
        assert p == 0, f"the stand-in is the identity at p = 0 only, not p = {p}"

    def forward(self, x):
        return x


def _stand_ins() -> None:
    if importlib.util.find_spec("torchvision") is None:
        sys.modules["torchvision"] = types.ModuleType("torchvision")
        sys.modules["torchvision.ops"] = types.SimpleNamespace(StochasticDepth=_IdentityDepth)
    if importlib.util.find_spec("wandb") is None:
        sys.modules["wandb"] = types.ModuleType("wandb")


def make() -> None:
    sys.path.insert(0, str(THIRD_PARTY / "zoology"))
    _stand_ins()
    from zoology.config import ModelConfig, ModuleConfig
    from zoology.model import LanguageModel

    config = ModelConfig(d_model=D_MODEL, n_layers=LAYERS, max_position_embeddings=SEQ_LEN, vocab_size=VOCAB,
                         embed_dropout=0.0, resid_dropout=0.0,
                         sequence_mixer=ModuleConfig(name="zoology.mixers.slide_attn.SlidingAttn",
                                                     kwargs={"block_size": BLOCK_SIZE, "dropout": 0.0}),
                         state_mixer=ModuleConfig(name="torch.nn.Identity", kwargs={}))
    model = LanguageModel(config).double().eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # norm gains around 1, everything else around 0
        for name, p in model.named_parameters():
            gain = name.endswith("weight") and ("norm" in name or "ln_f" in name)
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3 + gain)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ_LEN), generator=g)
    logits = model(ids, position_ids=torch.arange(SEQ_LEN))  # what it makes itself on its default device, CUDA
    glogits = torch.randn(logits.shape, generator=g, dtype=logits.dtype)
    logits.backward(glogits)
    out = {f"weight.{n}": p for n, p in model.named_parameters()}
    out |= {f"grad.{n}": p.grad for n, p in model.named_parameters()}
    save_fixture("zoology_lm", out | {"ids": ids, "logits": logits, "glogits": glogits})
