"""Parity fixtures: tensors computed by the reference implementations researchers use, stored as data.

The references (Zoology, mamba-ssm, flash-linear-attention, the GatedFWA authors' layer) run only
where a fixture is made, from git-ignored checkouts under ``third_party/`` (see ``make_fixtures.py``);
CI compares zoo against the stored tensors on CPU and never imports a reference.

A fixture is one ``.pt`` file holding a flat ``dict[str, Tensor]`` (weights, inputs, outputs and
gradients), loaded with ``weights_only=True``.
"""
from __future__ import annotations

from pathlib import Path

import torch

FIXTURES = Path(__file__).parent / "fixtures"


def save_fixture(name: str, tensors: dict[str, torch.Tensor]) -> Path:
    """Write ``tensors`` (detached, on CPU, contiguous) to ``fixtures/<name>.pt``."""
    FIXTURES.mkdir(exist_ok=True)
    path = FIXTURES / f"{name}.pt"
    torch.save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, path)
    return path


def load_fixture(name: str) -> dict[str, torch.Tensor]:
    return torch.load(FIXTURES / f"{name}.pt", weights_only=True)


def max_abs_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    """max |ours - reference| in float64 (the number the parity table reports)."""
    return float((ours.double() - reference.double()).abs().max())
