"""zoo's GLA, RetNet and HGRN2 layers against fla 0.6.0's ``GatedLinearAttention``, ``MultiScaleRetention`` and
``HGRN2Attention`` (their PyTorch paths, see ``make_fla_layers.py``): same weights, outputs and every gradient
(fixtures; fla is not imported here)."""
import pytest
import torch

from capture import assert_small, compare
from fixtures import load_fixture
from zoo.mixers.gla import GatedLinearAttention
from zoo.mixers.hgrn2 import HGRN2
from zoo.mixers.retnet import MultiScaleRetention

PROJECTIONS = ["q_proj.weight", "k_proj.weight", "v_proj.weight", "g_proj.weight", "o_proj.weight"]
GATED_NORM = {"g_norm_swish_gate.weight": "o_norm.weight"}  # fla's fused RMSNorm x swish gate, zoo's HeadRMSNorm

CASES = {  # fixture: (zoo layer, fla's parameter names -> zoo's)
    "fla_gla_layer": (lambda: GatedLinearAttention(16, num_heads=2, gate_low_rank_dim=4),
                      {**{n: n for n in PROJECTIONS + ["gk_proj.0.weight", "gk_proj.1.weight", "gk_proj.1.bias"]},
                       **GATED_NORM}),
    "fla_retnet_layer": (lambda: MultiScaleRetention(16, num_heads=2), {**{n: n for n in PROJECTIONS}, **GATED_NORM}),
    "fla_hgrn2_layer": (lambda: HGRN2(16, expand_ratio=8),
                        {n: n for n in ["q_proj.weight", "f_proj.weight", "i_proj.weight", "g_norm.weight",
                                        "o_proj.weight"]}),
}


# float32 rounding: the weight gradients here are O(10) (measured up to 8.8e-6 off, GLA's q_proj), the outputs O(1)
TOL = 5e-5


@pytest.mark.parametrize("name", CASES)
def test_layer_matches_fla(name):
    torch.manual_seed(0)
    make_layer, mapping = CASES[name]
    assert_small(compare(make_layer(), load_fixture(name), mapping), TOL)
