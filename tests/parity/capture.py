"""Record a module's forward and backward as fixture tensors, and check another module against them.

A recorded fixture holds, for one module and one input::

    w.<name>   every parameter, by the reference's names, after a small random perturbation (so that
               zero-initialised weights, such as RWKV-7's output projection, cannot hide a mismatch)
    x, gy      the input and the upstream gradient of the output
    y, gx      the output and the input's gradient
    g.<name>   every parameter's gradient

``compare`` loads ``w.*`` into zoo's module through an explicit name mapping, reruns forward and backward
and returns the max abs errors of the output and of all gradients.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from fixtures import max_abs_error


def perturb(module: nn.Module, scale: float = 0.1, seed: int = 0) -> None:
    """Add ``scale * N(0, 1)`` noise to every parameter of ``module`` (deterministic in ``seed``)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(module.named_parameters()):
            p.add_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))


def capture(module: nn.Module, x: torch.Tensor, forward: Callable | None = None, seed: int = 0,
            prefix: str = "") -> dict[str, torch.Tensor]:
    """Forward ``x`` through ``module`` (or ``forward(module, x)``), backward a random ``gy``; all as tensors."""
    forward = forward or (lambda m, inp: m(inp))
    x = x.detach().clone().requires_grad_(True)
    y = forward(module, x)
    gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=y.dtype)
    module.zero_grad(set_to_none=True)
    y.backward(gy)
    out = {"x": x, "gy": gy, "y": y, "gx": x.grad}
    for name, p in module.named_parameters():
        out[f"w.{name}"] = p
        out[f"g.{name}"] = p.grad if p.grad is not None else torch.zeros_like(p)
    return {prefix + k: v.detach() for k, v in out.items()}


def load_mapped(module: nn.Module, fixture: dict[str, torch.Tensor], mapping: dict[str, str],
                reshape: dict[str, Callable] | None = None, prefix: str = "") -> None:
    """Copy ``fixture[prefix + "w." + ref]`` into zoo's parameter ``mapping[ref]``, through ``reshape[ref]``
    when a layout differs. Every zoo parameter must be mapped exactly once."""
    reshape = reshape or {}
    params = dict(module.named_parameters())
    assert sorted(mapping.values()) == sorted(params), (sorted(mapping.values()), sorted(params))
    with torch.no_grad():
        for ref, ours in mapping.items():
            value = fixture[f"{prefix}w.{ref}"]
            params[ours].copy_(reshape.get(ref, lambda t: t)(value).view_as(params[ours]))


def compare(module: nn.Module, fixture: dict[str, torch.Tensor], mapping: dict[str, str],
            reshape: dict[str, Callable] | None = None, forward: Callable | None = None,
            prefix: str = "") -> dict[str, float]:
    """Max abs errors of zoo's ``module`` against a fixture: ``{"y": .., "gx": .., "g.<zoo name>": ..}``."""
    forward, reshape = forward or (lambda m, inp: m(inp)), reshape or {}
    load_mapped(module, fixture, mapping, reshape, prefix)
    x = fixture[prefix + "x"].clone().requires_grad_(True)
    y = forward(module, x)
    y.backward(fixture[prefix + "gy"])
    errors = {"y": max_abs_error(y.detach(), fixture[prefix + "y"]), "gx": max_abs_error(x.grad, fixture[prefix + "gx"])}
    params = dict(module.named_parameters())
    for ref, ours in mapping.items():
        want = reshape.get(ref, lambda t: t)(fixture[f"{prefix}g.{ref}"]).reshape(params[ours].shape)
        errors[f"g.{ours}"] = max_abs_error(params[ours].grad, want)
    return errors


def assert_small(errors: dict[str, float], tol: float) -> None:
    """Every error of ``compare`` below ``tol``; the message lists those above."""
    bad = {k: v for k, v in errors.items() if not v <= tol}
    assert not bad, f"max abs errors above {tol:g}: {bad}"
