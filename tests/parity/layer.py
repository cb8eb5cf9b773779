"""Run a zoo layer with a fixture's weights: the shared step of the layer parity tests."""
from __future__ import annotations

import torch


def run_with_weights(layer: torch.nn.Module, weights: dict[str, torch.Tensor], x: torch.Tensor, gy: torch.Tensor):
    """Load ``weights`` (zoo parameter name -> tensor; every parameter must be given) into ``layer`` in
    float64, run it on ``x`` (B, T, D) and backpropagate ``gy``.

    Returns:
        y (B, T, D), the input gradient (B, T, D), and {parameter name: gradient}.
    """
    layer = layer.double().eval()
    missing = set(dict(layer.named_parameters())) ^ set(weights)
    assert not missing, f"parameters without a reference weight, or unknown names: {sorted(missing)}"
    with torch.no_grad():
        for name, p in layer.named_parameters():
            p.copy_(weights[name])
    x = x.clone().requires_grad_(True)
    y = layer(x)
    y.backward(gy)
    return y.detach(), x.grad, {n: p.grad for n, p in layer.named_parameters()}
