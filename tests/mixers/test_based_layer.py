"""BASED's layer alternation (its Taylor attention is tested in tests/kernels/test_based.py)."""
from zoo.mixers.based import Based, BaseConv, TaylorLinearAttention


def test_layers_alternate_conv_and_attention():
    assert isinstance(Based(32, layer_idx=0).inner, BaseConv)
    assert isinstance(Based(32, layer_idx=1).inner, TaylorLinearAttention)
