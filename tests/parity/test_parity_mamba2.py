"""zoo's Mamba-2 against fla's ``Mamba2`` layer (0.6.0, its PyTorch path): same weights, outputs and
gradients (fixture)."""
import torch

from capture import assert_small, compare
from fixtures import load_fixture
from zoo.mixers.mamba2 import Mamba2

# fla's parameter names -> zoo's
MAPPING = {"dt_bias": "dt_bias", "A_log": "A_log", "D": "D", "in_proj.weight": "in_proj.weight",
           "conv1d.weight": "conv.conv.weight", "conv1d.bias": "conv.conv.bias", "norm.weight": "norm.weight",
           "out_proj.weight": "out_proj.weight"}


def test_mamba2_matches_fla():
    torch.manual_seed(0)
    layer = Mamba2(16, d_state=8, expand=2, headdim=8)
    assert_small(compare(layer, load_fixture("fla_mamba2"), MAPPING), 1e-5)
