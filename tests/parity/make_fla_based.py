"""Fixtures of flash-linear-attention's BASED layer: ``BasedLinearAttention`` (fla 0.6.0, its default
``mode="parallel"``, causal).

Reference: ``pip install --no-deps fla-core==0.6.0 flash-linear-attention==0.6.0``. The layer calls the Triton
``parallel_based``, which does not run on a CPU; it is replaced here by fla's own PyTorch reference of the same op,
``naive_parallel_based`` (heads first, where the kernel takes [B, T, H, K]; both normalise with z + 1e-6), and the
layer code around it runs as released. ``transformers`` is stubbed as in ``make_fla.py``. Runs on CPU in float32.
"""
from __future__ import annotations

import torch

from capture import capture, perturb
from fixtures import save_fixture
from make_fla import stub_transformers

B, L, D = 2, 16, 16


def import_fla_based():
    stub_transformers()
    from fla.layers import based
    from fla.ops.based.naive import naive_parallel_based

    def parallel_based(q, k, v, scale=None, use_norm=True):
        heads_first = lambda t: t.transpose(1, 2)  # noqa: E731
        return heads_first(naive_parallel_based(*map(heads_first, (q, k, v)), scale, use_norm))

    based.parallel_based = parallel_based
    return based


def make() -> None:
    based = import_fla_based()
    x = torch.randn(B, L, D, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(4)
    layer = based.BasedLinearAttention(hidden_size=D, feature_dim=8, num_heads=2, num_key_value_heads=2)
    perturb(layer)
    save_fixture("fla_based_layer", capture(layer, x))
