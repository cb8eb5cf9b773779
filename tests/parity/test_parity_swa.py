"""zoo's swa against Zoology's SlidingAttn (fixture ``zoology_slide_attn``, see make_zoology_attention.py).

Zoology's layer is single-head and its ``block_size`` b lets a query see b + 1 keys: zoo's
``num_heads=1, window=b + 1`` (the fixture has b = 5).
"""
from fixtures import load_fixture, max_abs_error
from layer import run_with_weights
from test_parity_softmax import ZOOLOGY_NAMES

from zoo.mixers.attention import SlidingWindowAttention


def test_swa_matches_zoology_sliding_attn():
    fx = load_fixture("zoology_slide_attn")
    layer = SlidingWindowAttention(32, num_heads=1, bias=True, positions="none", window=6)
    y, gx, grads = run_with_weights(layer, {n: fx[f"weight.{z}"] for n, z in ZOOLOGY_NAMES.items()}, fx["x"], fx["gy"])
    assert max_abs_error(y, fx["y"]) < 1e-10
    assert max_abs_error(gx, fx["grad.x"]) < 1e-10
    for name, z in ZOOLOGY_NAMES.items():
        assert max_abs_error(grads[name], fx[f"grad.{z}"]) < 1e-10, name


def test_a_window_off_by_one_is_detected():
    """The fixture distinguishes window b + 1 from b: the test above cannot pass by accident."""
    fx = load_fixture("zoology_slide_attn")
    layer = SlidingWindowAttention(32, num_heads=1, bias=True, positions="none", window=5)
    y, _, _ = run_with_weights(layer, {n: fx[f"weight.{z}"] for n, z in ZOOLOGY_NAMES.items()}, fx["x"], fx["gy"])
    assert max_abs_error(y, fx["y"]) > 1e-3
