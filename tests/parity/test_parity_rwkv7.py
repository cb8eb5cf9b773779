"""zoo's RWKV-7 against fla's ``RWKV7Attention`` (0.6.0): two layers, the second mixing in the first's
values, with the same weights; outputs, gradients and the depth-dependent initialisation (fixture)."""
import pytest
import torch
from torch import nn

from capture import assert_small, compare
from fixtures import load_fixture
from zoo.mixers.rwkv7 import RWKV7

SHARED = ["x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "k_k", "k_a", "r_k", "r_proj.weight", "k_proj.weight",
          "v_proj.weight", "o_proj.weight", "g_norm.weight", "g_norm.bias"]
LORA = {"lora.0.weight": "down.weight", "lora.2.weight": "up.weight", "lora.2.bias": "bias"}


def mapping(layer_idx: int) -> dict[str, str]:
    """fla's parameter names -> zoo's, for layer ``layer_idx`` of the pair (x_* are (1, 1, D) in fla)."""
    loras = ["w_lora", "a_lora", "g_lora"] + (["v_lora"] if layer_idx else [])
    names = {n: n for n in SHARED}
    names.update({f"{lora}.{ref}": f"{lora}.{ours}" for lora in loras for ref, ours in LORA.items()
                  if not (lora == "g_lora" and ref == "lora.2.bias")})
    return {f"{layer_idx}.{ref}": f"{layer_idx}.{ours}" for ref, ours in names.items()}


def pair() -> nn.ModuleList:
    return nn.ModuleList(RWKV7(16, layer_idx=i, n_layers=2, head_dim=8, decay_rank=8, iclr_rank=8,
                               value_rank=8, gate_rank=8) for i in range(2))


def two_layers(m, x):
    state = {}
    return torch.cat([m[0](x, state), m[1](x, state)], dim=-1)


def test_rwkv7_matches_fla():
    torch.manual_seed(0)
    assert_small(compare(pair(), load_fixture("fla_rwkv7"), {**mapping(0), **mapping(1)}, forward=two_layers), 1e-5)


@pytest.mark.parametrize("layer_idx", [0, 1])
def test_deterministic_initialisation_matches_fla(layer_idx):
    """Everything fla does not draw at random: mixes, biases, gains, and the zero-initialised weights."""
    fixture = load_fixture("fla_rwkv7")
    ours = dict(pair()[layer_idx].named_parameters())
    for ref, name in mapping(layer_idx).items():
        name = name.split(".", 1)[1]
        if name in ("r_proj.weight", "k_proj.weight", "v_proj.weight") or name.endswith("up.weight"):
            continue  # orthogonal draws
        torch.testing.assert_close(ours[name].detach(), fixture[f"init.{ref}"].view_as(ours[name]),
                                   rtol=1e-6, atol=1e-6, msg=name)
