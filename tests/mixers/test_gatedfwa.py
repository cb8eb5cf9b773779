"""GatedFWA variants: what each builds, that the switches compose, and the GPU kernels against CPU."""
import copy

import pytest
import torch

from zoo.errors import ConfigError
from zoo.kernels import backend
from zoo.mixers.attention import SlidingWindowAttention
from zoo.mixers.gatedfwa import GatedFWA


def test_paper_variant_has_gains_at_one_output_gate_and_spread_decays():
    layer = GatedFWA(32, num_heads=4, max_seq_len=64)
    assert (layer.q_norm.weight == 1).all() and (layer.k_norm.weight == 1).all()  # as published, no tuning
    assert layer.out_gate is not None and layer.eps == 1e-6
    torch.testing.assert_close(torch.nn.functional.softplus(layer.gate_bias), torch.logspace(-3, -1, 4))


def test_released_variant_has_parameter_free_norms_no_output_gate_and_bias_two():
    layer = GatedFWA(32, num_heads=2, variant="released")
    names = {n for n, _ in layer.named_parameters()}
    assert names == {"qkv.weight", "out_proj.weight", "gate.weight", "gate_bias", "beta_proj"}
    torch.testing.assert_close(layer.gate_bias.detach(), torch.full((2,), -2.0))  # released fgate bias +2
    assert layer.eps == 1e-3


def test_without_decay_norms_and_gate_it_is_sliding_window_attention():
    torch.manual_seed(0)
    swa = SlidingWindowAttention(32, num_heads=2, window=5, bias=False)
    gfwa = GatedFWA(32, num_heads=2, window=5, decay=False, qk_norm="none", output_gate=False)
    gfwa.load_state_dict(swa.state_dict())
    x = torch.randn(2, 20, 32)
    torch.testing.assert_close(gfwa(x), swa(x))


@pytest.mark.parametrize("kwargs, key", [({"variant": "nips"}, "variant"), ({"qk_norm": "layer"}, "qk_norm"),
                                         ({"alpha_init": 0.0}, "alpha_init"),
                                         ({"variant": "released", "qk_gain_init": 2.0}, "qk_gain_init")])
def test_bad_switches_name_key_and_value(kwargs, key):
    with pytest.raises(ConfigError, match=f"model.mixer_kwargs.{key}"):
        GatedFWA(32, **kwargs)


@pytest.mark.gpu
@pytest.mark.long
@pytest.mark.parametrize("kwargs", [{}, {"variant": "released", "positions": "rope", "k_shift": True, "v_shift": True},
                                    {"qk_norm": "none", "output_gate": False}])
def test_gpu_kernels_match_cpu_reference(kwargs):
    """Same weights on CPU (PyTorch reference) and GPU (Triton gate scan and attention), float32."""
    torch.manual_seed(0)
    cpu = GatedFWA(128, num_heads=2, max_seq_len=128, **kwargs)
    gpu = copy.deepcopy(cpu).cuda()
    x = torch.randn(3, 100, 128, requires_grad=True)
    xg = x.detach().cuda().requires_grad_(True)
    gy = torch.randn(3, 100, 128)
    cpu(x).backward(gy)
    backend.clear()
    y = gpu(xg)
    y.backward(gy.cuda())
    assert backend.last_backend("gatedfwa.attention") == backend.last_backend("gatedfwa.gate_cumsum") == "triton"
    torch.testing.assert_close(y.cpu(), cpu(x), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(xg.grad.cpu(), x.grad, rtol=1e-3, atol=1e-3)
    for (name, p), q in zip(cpu.named_parameters(), gpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-3, atol=1e-3, msg=name)
