"""zoo's DeltaNet and Gated DeltaNet against fla's ``DeltaNet`` and ``GatedDeltaNet`` layers (0.6.0), with and
without negative eigenvalues (fla's ``allow_neg_eigval``): same weights, outputs and all gradients (fixtures
from ``make_fla_deltanet.py``).

The unit-length q and k are fla's ``x / sqrt(sum(x^2) + 1e-6)`` on both sides
(``zoo.kernels.delta_rule.naive.l2norm``); ``F.normalize``'s ``x / max(|x|, 1e-6)`` would miss these fixtures'
gradients by up to 3e-4.

Tolerance 5e-5: the gradients reach |g| ~ 40 (sums over B*T = 32 positions through the recurrence), where
float32 round-off is ~4e-6 per operation; measured at most 1.6e-5.
"""
import pytest
import torch

from capture import assert_small, compare
from fixtures import load_fixture
from zoo.mixers.deltanet import DeltaNet, GatedDeltaNet

# fla's parameter names -> zoo's (fla's ShortConvolution is an nn.Conv1d; zoo's ShortConv wraps one as .conv)
DELTANET = {"q_proj.weight": "q_proj.weight", "k_proj.weight": "k_proj.weight", "v_proj.weight": "v_proj.weight",
            "b_proj.weight": "b_proj.weight", "q_conv1d.weight": "q_conv.conv.weight",
            "k_conv1d.weight": "k_conv.conv.weight", "v_conv1d.weight": "v_conv.conv.weight",
            "o_norm.weight": "o_norm.weight", "o_proj.weight": "o_proj.weight"}
GATED_DELTANET = {**DELTANET, "a_proj.weight": "a_proj.weight", "A_log": "A_log", "dt_bias": "dt_bias",
                  "g_proj.weight": "g_proj.weight"}

TOL = 5e-5


def deltanet(negative: bool) -> DeltaNet:
    return DeltaNet(16, num_heads=2, expand_k=1.0, expand_v=1.0, conv_size=4, negative_eigenvalues=negative)


def gated_deltanet(negative: bool) -> GatedDeltaNet:
    return GatedDeltaNet(16, num_heads=2, head_dim=8, expand_v=2.0, conv_size=4, negative_eigenvalues=negative)


# (fla fixture, zoo layer, mapping): fla's DeltaNet(hidden_size=16, num_heads=2) and
# GatedDeltaNet(hidden_size=16, head_dim=8, num_heads=2, expand_v=2), allow_neg_eigval as named
CASES = {"deltanet": ("fla_deltanet_layer", lambda: deltanet(False), DELTANET),
         "deltanet_neg": ("fla_deltanet_neg_layer", lambda: deltanet(True), DELTANET),
         "gated_deltanet": ("fla_gated_deltanet_layer", lambda: gated_deltanet(False), GATED_DELTANET),
         "gated_deltanet_neg": ("fla_gated_deltanet_neg_layer", lambda: gated_deltanet(True), GATED_DELTANET)}


def errors(case: str) -> dict[str, float]:
    fixture, layer, mapping = CASES[case]
    torch.manual_seed(0)
    return compare(layer(), load_fixture(fixture), mapping)


@pytest.mark.parametrize("case", CASES)
def test_matches_fla(case):
    assert_small(errors(case), TOL)


def test_negative_eigenvalues_are_exercised():
    """zoo with beta in (0, 1) misses fla's ``allow_neg_eigval`` fixtures by far."""
    for fixture, layer, mapping in [("fla_deltanet_neg_layer", lambda: deltanet(False), DELTANET),
                                    ("fla_gated_deltanet_neg_layer", lambda: gated_deltanet(False), GATED_DELTANET)]:
        torch.manual_seed(0)
        assert compare(layer(), load_fixture(fixture), mapping)["y"] > 1e-2
