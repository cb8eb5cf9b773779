"""zoo's softmax attention against Zoology's MHA (fixture ``zoology_mha``, see make_zoology_attention.py)."""
from fixtures import load_fixture, max_abs_error
from layer import run_with_weights

from zoo.mixers.attention import SoftmaxAttention

ZOOLOGY_NAMES = {"qkv.weight": "Wqkv.weight", "qkv.bias": "Wqkv.bias",
                 "out_proj.weight": "out_proj.weight", "out_proj.bias": "out_proj.bias"}


def test_softmax_matches_zoology_mha():
    fx = load_fixture("zoology_mha")
    layer = SoftmaxAttention(32, num_heads=2, bias=True, positions="none")
    y, gx, grads = run_with_weights(layer, {n: fx[f"weight.{z}"] for n, z in ZOOLOGY_NAMES.items()}, fx["x"], fx["gy"])
    assert max_abs_error(y, fx["y"]) < 1e-10
    assert max_abs_error(gx, fx["grad.x"]) < 1e-10
    for name, z in ZOOLOGY_NAMES.items():
        assert max_abs_error(grads[name], fx[f"grad.{z}"]) < 1e-10, name
