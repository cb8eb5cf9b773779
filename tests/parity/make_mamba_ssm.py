"""Fixtures of mamba-ssm: ``selective_scan_ref`` and the ``Mamba`` block (``modules/mamba_simple.py``).

Reference: the public repository state-spaces/mamba, checked out (git-ignored) at ``third_party/mamba``
of the main repository, or at ``$MAMBA``. Its package ``__init__`` imports CUDA-only and Hugging Face
modules, so the package is registered without running it and only the two pure-PyTorch files load. With
``causal_conv1d`` absent the block takes its unfused path (``nn.Conv1d`` + SiLU, then
``selective_scan_fn``), and ``selective_scan_fn`` (CUDA) is replaced by ``selective_scan_ref``.
Runs on CPU in float32. Regenerated from state-spaces/mamba at e9594ce (the two files last changed in f577286),
the fixture comes out the same tensors as the committed one.
"""
from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import torch

from capture import capture, perturb
from fixtures import save_fixture

MAMBA = Path(os.environ.get("MAMBA", Path(__file__).resolve().parents[2] / "third_party" / "mamba"))


def import_mamba_ssm():
    package = types.ModuleType("mamba_ssm")
    package.__path__ = [str(MAMBA / "mamba_ssm")]
    sys.modules["mamba_ssm"] = package
    from mamba_ssm.modules import mamba_simple
    from mamba_ssm.ops import selective_scan_interface

    assert mamba_simple.causal_conv1d_fn is None, "the fixture needs the unfused path (no causal_conv1d)"
    mamba_simple.selective_scan_fn = selective_scan_interface.selective_scan_ref
    return mamba_simple, selective_scan_interface


def make() -> None:
    mamba_simple, interface = import_mamba_ssm()
    gen = torch.Generator().manual_seed(0)
    Bt, L, D, N = 2, 20, 16, 8

    # the bare scan: u, delta (B, E, L); A (E, N); B, C (B, N, L); no D, z or bias (zoo applies them around it)
    E = 2 * D
    inputs = {"u": torch.randn(Bt, E, L, generator=gen), "delta": 0.5 * torch.rand(Bt, E, L, generator=gen) + 0.01,
              "A": -torch.rand(E, N, generator=gen) * 2, "B": torch.randn(Bt, N, L, generator=gen),
              "C": torch.randn(Bt, N, L, generator=gen)}
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    y = interface.selective_scan_ref(**leaves)
    gy = torch.randn(y.shape, generator=gen)
    y.backward(gy)
    tensors = {f"scan.{k}": v for k, v in inputs.items()}
    tensors.update({"scan.y": y, "scan.gy": gy, **{f"scan.g{k}": v.grad for k, v in leaves.items()}})

    torch.manual_seed(1)
    block = mamba_simple.Mamba(D, d_state=N, use_fast_path=False, layer_idx=0)
    perturb(block)
    tensors.update(capture(block, torch.randn(Bt, L, D, generator=gen)))
    save_fixture("mamba_ssm", tensors)
