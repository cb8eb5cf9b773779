"""The attention family (softmax, swa, gatedfwa) and the model options every mixer shares:
positions, init policy, dropout, state_size in values."""
import math

import pytest
import torch

from zoo.errors import ConfigError
from zoo.mixers.registry import check_mixer_kwargs
from zoo.model import LanguageModel
from zoo.rope import apply_rope
from causality import assert_causal

FAMILY = [("softmax", {}), ("swa", {}), ("gatedfwa", {}), ("gatedfwa", {"variant": "released"}),
          ("gatedfwa", {"variant": "released", "k_shift": True, "v_shift": True})]


def small_model(mixer, kwargs=None, seed=0, **options):
    torch.manual_seed(seed)
    return LanguageModel(64, 32, n_layers=2, mixer=mixer, mixer_kwargs=kwargs, max_seq_len=32, **options)


@pytest.mark.parametrize("positions", ["learned", "rope", "none"])
@pytest.mark.parametrize("mixer, kwargs", FAMILY)
def test_causal(mixer, kwargs, positions):
    assert_causal(small_model(mixer, kwargs, positions=positions))


@pytest.mark.parametrize("mixer, kwargs", FAMILY)
def test_gradients_reach_every_mixer_parameter(mixer, kwargs):
    model = small_model(mixer, kwargs, init="mixer")
    model(torch.randint(0, 64, (2, 12))).square().mean().backward()
    missing = [n for n, p in model.named_parameters() if ".mixer." in n and (p.grad is None or not p.grad.any())]
    assert not missing


def test_state_size_counts_values():
    """KV cache values per sequence: 2 * L * D per softmax layer; the last w tokens for windowed mixers,
    plus one decay prefix per head and token for gatedfwa, plus a D-vector per token shift."""
    L, D, layers, w, H = 32, 32, 2, 16, 2
    assert small_model("softmax").state_size(L) == layers * 2 * L * D
    assert small_model("swa").state_size(L) == layers * 2 * w * D
    assert small_model("swa").state_size(8) == layers * 2 * 8 * D
    assert small_model("gatedfwa").state_size(L) == layers * w * (2 * D + H)
    shifted = small_model("gatedfwa", {"variant": "released", "k_shift": True, "v_shift": True})
    assert shifted.state_size(L) == layers * (w * (2 * D + H) + 2 * D)


def test_rope_rotates_by_relative_position():
    """RoPE keeps norms, and q_i . k_j depends on i - j only."""
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16).expand(1, 12, 1, 16), torch.randn(1, 1, 1, 16).expand(1, 12, 1, 16)
    rq, rk = apply_rope(q), apply_rope(k)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))
    dots = torch.einsum("bihd,bjhd->ij", rq, rk)
    torch.testing.assert_close(dots[5, 2], dots[9, 6])
    torch.testing.assert_close(dots[2, 5], dots[6, 9])
    assert not torch.allclose(dots[5, 2], dots[5, 3])


def test_model_options_reach_mixers_that_take_them():
    model = small_model("softmax", positions="rope", dropout=0.25)
    mixer = model.blocks[0].mixer
    assert mixer.rope and mixer.attention_dropout == 0.25 and model.pos_embed is None
    assert small_model("softmax").pos_embed is not None  # attention's default: learned positions
    assert small_model("hyena").pos_embed is None  # a mixer without default_positions: none
    assert not small_model("swa", positions="learned").blocks[0].mixer.rope


def test_softmax_dropout_is_active_in_training_only():
    model = small_model("softmax", dropout=0.5)
    ids = torch.randint(0, 64, (2, 16))
    assert not torch.equal(model(ids), model(ids))
    model.eval()
    assert torch.equal(model(ids), model(ids))


def test_embed_dropout_is_active_in_training_only():
    ids = torch.randint(0, 64, (2, 16))
    plain = small_model("swa")  # no dropout anywhere: the window kernels take none
    assert torch.equal(plain(ids), plain(ids))
    model = small_model("swa", embed_dropout=0.5)
    assert not torch.equal(model(ids), model(ids))
    model.eval()
    assert torch.equal(model(ids), model(ids)) and torch.equal(model(ids), plain.eval()(ids))


@pytest.mark.parametrize("options, key", [({"positions": "rope", "mixer": "mamba"}, "model.positions"),
                                          ({"positions": "absolute"}, "model.positions"),
                                          ({"init": "xavier"}, "model.init"),
                                          ({"dropout": 1.5}, "model.dropout"),
                                          ({"embed_dropout": 1.0}, "model.embed_dropout"),
                                          ({"n_layers": 0}, "model.n_layers")])
def test_bad_model_options_name_the_key(options, key):
    options = {"mixer": "softmax", **options}
    with pytest.raises(ConfigError, match=key):
        LanguageModel(64, 32, max_seq_len=32, **options)


@pytest.mark.parametrize("name", ["dropout", "positions", "n_layers"])
def test_model_options_are_not_mixer_kwargs(name):
    with pytest.raises(ConfigError, match=f"model.mixer_kwargs.{name}"):
        check_mixer_kwargs("softmax", {name: 1})


def test_zoology_init_redraws_every_linear_and_keeps_special_parameters():
    model = small_model("softmax")  # Zoology's biased projections
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.bias is not None and not m.bias.any() for m in linears)
    n_layers = 2
    big = LanguageModel(64, 256, n_layers=n_layers, mixer="gatedfwa", max_seq_len=32)
    mixer = big.blocks[0].mixer
    assert abs(mixer.qkv.weight.std().item() - 0.02) < 2e-3
    assert abs(mixer.out_proj.weight.std().item() - 0.02 / math.sqrt(2 * n_layers)) < 1e-3
    assert abs(big.embed.weight.std().item() - 0.02) < 2e-3
    # the decay bias and W_beta are not Linear parts: they keep the mixer's values
    torch.testing.assert_close(torch.nn.functional.softplus(mixer.gate_bias), torch.logspace(-3, -1, 2))
    assert not mixer.beta_proj.any()
    assert (mixer.q_norm.weight == 1).all()


def test_mixer_init_keeps_pytorch_defaults_inside_mixers():
    big = LanguageModel(64, 256, mixer="softmax", max_seq_len=32, init="mixer")
    w = big.blocks[0].mixer.qkv.weight
    assert abs(w.std().item() - 1 / math.sqrt(3 * 256)) < 2e-3  # nn.Linear's kaiming-uniform default
