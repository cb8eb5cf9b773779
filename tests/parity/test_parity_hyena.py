"""zoo's Hyena against Zoology's ``Hyena`` (dbcb60d): same weights, outputs and gradients (fixture)."""
import torch

from capture import assert_small, compare
from fixtures import load_fixture
from zoo.mixers.hyena import Hyena

# Zoology's parameter names -> zoo's (layouts differ only by leading singleton dims)
MAPPING = {
    "in_proj.weight": "in_proj.weight", "in_proj.bias": "in_proj.bias",
    "short_filter.weight": "short_conv.conv.weight", "short_filter.bias": "short_conv.conv.bias",
    "filter_fn.bias": "filter_bias", "filter_fn.pos_emb.z": "filter.z",
    "filter_fn.implicit_filter.0.weight": "filter.mlp.0.weight", "filter_fn.implicit_filter.0.bias": "filter.mlp.0.bias",
    "filter_fn.implicit_filter.1.freq": "filter.mlp.1.freq",  # one Sin module after every hidden layer
    "filter_fn.implicit_filter.2.weight": "filter.mlp.2.weight", "filter_fn.implicit_filter.2.bias": "filter.mlp.2.bias",
    "filter_fn.implicit_filter.4.weight": "filter.mlp.4.weight", "filter_fn.implicit_filter.4.bias": "filter.mlp.4.bias",
    "filter_fn.implicit_filter.6.weight": "filter.mlp.6.weight",
    "out_proj.weight": "out_proj.weight", "out_proj.bias": "out_proj.bias",
}


def test_hyena_matches_zoology():
    fixture = load_fixture("zoology_hyena")
    layer = Hyena(16, max_seq_len=32)
    assert_small(compare(layer, fixture, MAPPING), 2e-5)


def test_positional_features_match_zoology_at_init():
    want = load_fixture("zoology_hyena")["init.z5"]
    torch.testing.assert_close(Hyena(16, max_seq_len=32, emb_dim=5).filter.z.detach(), want)
