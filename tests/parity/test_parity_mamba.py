"""zoo's Mamba against mamba-ssm: the selective scan against ``selective_scan_ref`` and the block against
``Mamba`` (``mamba_simple.py``, unfused path); same weights, outputs and gradients (fixture)."""
import torch

from capture import assert_small, compare
from fixtures import load_fixture, max_abs_error
from zoo.kernels.selective_scan.naive import selective_scan_naive
from zoo.mixers.mamba import Mamba

# mamba-ssm's parameter names -> zoo's (dt_proj's bias is a separate parameter in zoo)
MAPPING = {"A_log": "A_log", "D": "D", "in_proj.weight": "in_proj.weight", "conv1d.weight": "conv.conv.weight",
           "conv1d.bias": "conv.conv.bias", "x_proj.weight": "x_proj.weight", "dt_proj.weight": "dt_proj.weight",
           "dt_proj.bias": "dt_bias", "out_proj.weight": "out_proj.weight"}


def test_selective_scan_matches_reference():
    f = load_fixture("mamba_ssm")
    # mamba-ssm is channel-first (B, E, L), zoo time-first (B, L, E)
    u, dt, B, C = (f[f"scan.{k}"].transpose(1, 2).clone().requires_grad_(True) for k in ("u", "delta", "B", "C"))
    A = f["scan.A"].clone().requires_grad_(True)
    y = selective_scan_naive(u, dt, A, B, C)
    y.backward(f["scan.gy"].transpose(1, 2))
    errors = {"y": max_abs_error(y.detach().transpose(1, 2), f["scan.y"]), "gA": max_abs_error(A.grad, f["scan.gA"])}
    errors.update({f"g{k}": max_abs_error(t.grad.transpose(1, 2), f[f"scan.g{k}"])
                   for k, t in (("u", u), ("delta", dt), ("B", B), ("C", C))})
    assert_small(errors, 1e-5)


def test_block_matches_mamba_ssm():
    torch.manual_seed(0)
    assert_small(compare(Mamba(16, d_state=8), load_fixture("mamba_ssm"), MAPPING), 1e-5)
