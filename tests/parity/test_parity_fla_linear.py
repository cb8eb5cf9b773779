"""zoo's linear-attention references against flash-linear-attention 0.6.0's naive ops (stored fixtures,
written by ``make_fla_linear.py``; fla is not imported here)."""
import pytest
import torch

from fixtures import load_fixture, max_abs_error
from zoo.kernels.delta_rule.naive import delta_rule_recurrent
from zoo.kernels.gla.naive import gla_recurrent
from zoo.kernels.retention.naive import retention_naive
from zoo.mixers.deltanet import GatedDeltaNet

TOL = 1e-5


def test_gla_matches_fla_naive_recurrent_gla():
    f = load_fixture("fla_gla")
    assert max_abs_error(gla_recurrent(f["q"], f["k"], f["v"], f["g"]), f["o"]) < TOL


def test_retention_as_gla_matches_fla_naive_retention():
    f = load_fixture("fla_retention")
    assert max_abs_error(retention_naive(f["q"], f["k"], f["v"]), f["o"]) < TOL


@pytest.mark.parametrize("form", ["o_recurrent", "o_chunk"])
def test_delta_rule_matches_fla_naive(form):
    f = load_fixture("fla_delta_rule")
    assert f["beta"].max() > 1  # the negative-eigenvalue range is covered
    assert max_abs_error(delta_rule_recurrent(f["q"], f["k"], f["v"], f["beta"]), f[form]) < TOL


@pytest.mark.parametrize("form", ["o_recurrent", "o_chunk"])
def test_gated_delta_rule_matches_fla_naive(form):
    f = load_fixture("fla_gated_delta_rule")
    assert max_abs_error(delta_rule_recurrent(f["q"], f["k"], f["v"], f["beta"], f["g"]), f[form]) < TOL


def test_gated_deltanet_decay_matches_fla_gate():
    f = load_fixture("fla_gated_delta_rule")
    H = f["A_log"].shape[0]
    layer = GatedDeltaNet(4 * H, num_heads=H)
    x = torch.cat([f["a"], torch.zeros(*f["a"].shape[:2], 3 * H)], dim=-1)  # x W_a = a with W_a = [I 0]
    with torch.no_grad():
        layer.A_log.copy_(f["A_log"])
        layer.dt_bias.copy_(f["dt_bias"])
        layer.a_proj.weight.copy_(torch.eye(H, 4 * H))
        assert max_abs_error(layer.log_decay(x), f["g"]) < TOL
