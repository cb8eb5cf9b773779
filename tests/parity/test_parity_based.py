"""zoo's BASED layers against Zoology's (dbcb60d): ``BaseConv`` (even layers) and ``Based`` with the
Taylor feature map, quadratic view (odd layers); and the Taylor layer against fla 0.6.0's ``BasedLinearAttention``.
Same weights, outputs and gradients (fixtures)."""
from capture import assert_small, compare
from fixtures import load_fixture
from zoo.mixers.based import Based

# Zoology's parameter names -> zoo's
BASE_CONV = {"projection.weight": "inner.proj.weight", "projection.bias": "inner.proj.bias",
             "conv.conv.weight": "inner.conv.conv.weight", "conv.conv.bias": "inner.conv.conv.bias"}
TAYLOR = {"proj_q.weight": "inner.q_proj.weight", "proj_k.weight": "inner.k_proj.weight",
          "proj_v.weight": "inner.v_proj.weight", "proj_o.weight": "inner.o_proj.weight"}


def test_base_conv_matches_zoology():
    assert_small(compare(Based(16, layer_idx=0, conv_kernel=3), load_fixture("zoology_base_conv"), BASE_CONV), 1e-5)


def test_taylor_attention_matches_zoology():
    layer = Based(16, layer_idx=1, feature_dim=8, num_heads=2)
    assert_small(compare(layer, load_fixture("zoology_based"), TAYLOR), 1e-5)


def test_taylor_attention_matches_fla():
    """fla 0.6.0's ``BasedLinearAttention`` (its PyTorch path, ``make_fla_based.py``): the same layer as Zoology's,
    normalised with z + 1e-6 where Zoology and zoo add 1e-12: measured 1.4e-6 off in the outputs, up to 7.2e-6 in
    the weight gradients."""
    layer = Based(16, layer_idx=1, feature_dim=8, num_heads=2)
    fla_names = {name: f"inner.{name}" for name in ["q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"]}
    assert_small(compare(layer, load_fixture("fla_based_layer"), fla_names), 1e-5)
