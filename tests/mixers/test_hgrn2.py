"""HGRN2: fla's expand ratio where the width allows it, and the input gate tied to the forget gate."""
import torch

from zoo.mixers.hgrn2 import HGRN2


def test_expand_ratio_is_flas_128_where_it_fits():
    assert (HGRN2(512).num_heads, HGRN2(512).expand_ratio) == (4, 128)
    assert (HGRN2(64).num_heads, HGRN2(64).expand_ratio) == (1, 64)
    assert (HGRN2(64, expand_ratio=16).num_heads, HGRN2(64, expand_ratio=16).expand_ratio) == (4, 16)


def test_a_closed_forget_gate_keeps_no_input():
    """Forget gate 1 (f -> +inf) ties the input gate to 0: the state stays empty and the output is zero."""
    torch.manual_seed(0)
    layer = HGRN2(16, expand_ratio=8)
    with torch.no_grad():
        layer.f_proj.weight.zero_()
        layer.f_proj.weight[:, 0] = 1e4
    x = torch.randn(2, 5, 16)
    x[..., 0] = x[..., 0].abs() + 1
    assert layer(x).abs().max() < 1e-6
    x[..., 0] = -1  # forget gate 0: only the current input, nonzero
    assert layer(x).abs().max() > 1e-3
