"""zoo's RWKV-4 against Zoology's ``RWKVTimeMixer`` (dbcb60d, WKV from its CUDA kernel's definition):
same weights, outputs and gradients, and the depth-dependent initialisation (fixture)."""
import pytest
import torch

from capture import assert_small, compare
from fixtures import load_fixture
from zoo.mixers.rwkv import RWKV4

# Zoology's parameter names -> zoo's (Zoology's time_mix_* are (1, 1, D), zoo's (D,))
MAPPING = {"time_decay": "time_decay", "time_first": "time_first", "time_mix_k": "time_mix_k",
           "time_mix_v": "time_mix_v", "time_mix_r": "time_mix_r", "key.weight": "key.weight",
           "value.weight": "value.weight", "receptance.weight": "receptance.weight", "output.weight": "output.weight"}


def test_rwkv4_matches_zoology():
    assert_small(compare(RWKV4(16, layer_idx=1, n_layers=2), load_fixture("zoology_rwkv"), MAPPING), 1e-5)


def assert_initialised_as_zoology(layer: RWKV4, depth: int, layer_idx: int) -> None:
    """``layer``'s depth-dependent parameters are those of Zoology's layer ``layer_idx`` of ``depth`` (fixture)."""
    fixture = load_fixture("zoology_rwkv")
    for name in ("time_decay", "time_first", "time_mix_k", "time_mix_v", "time_mix_r"):
        torch.testing.assert_close(getattr(layer, name).detach(), fixture[f"init{depth}.{layer_idx}.{name}"],
                                   rtol=1e-6, atol=1e-6, msg=name)


@pytest.mark.parametrize("n_layers, layer_idx", [(2, 0), (2, 1), (4, 3)])
def test_initialisation_follows_depth(n_layers, layer_idx):
    assert_initialised_as_zoology(RWKV4(16, layer_idx=layer_idx, n_layers=n_layers), n_layers, layer_idx)


def test_init_depth_reproduces_the_layer_of_another_depth():
    """``init_depth`` sets the depth the schedule assumes whatever the model's is: Zoology's 2-layer runs get its
    layer's default depth 12 (``init_depth=12``); checked against the fixture's depth-4 layer in a model of 8."""
    assert_initialised_as_zoology(RWKV4(16, layer_idx=3, n_layers=8, init_depth=4), 4, 3)
