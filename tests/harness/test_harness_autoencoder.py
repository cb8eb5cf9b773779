"""MAD's autoencoder backbone (zoo/autoencoder.py): shapes, the pooled vector as the decoder's only input,
the backbone check before training, and a compression run end to end."""
import json
import math

import pytest
import torch
from omegaconf import OmegaConf

from zoo.autoencoder import AutoEncoder, sinusoids
from zoo.config import make_run_config, plain, validate
from zoo.errors import ConfigError
from zoo.model import LanguageModel
from zoo.run import main
from zoo.spec import build_model

B, T, D, V = 3, 9, 16, 11


def autoencoder(mixer: str) -> AutoEncoder:
    torch.manual_seed(0)
    return AutoEncoder(LanguageModel(V, D, n_layers=2, mixer=mixer, max_seq_len=T, state_mixer="mlp")).eval()


def test_sinusoids_are_fairseqs_table():
    table = sinusoids(5, 9)  # half = 4 frequencies 10000^(-i/3), then a zero column for the odd width
    t = torch.arange(5.0)
    for i, rate in enumerate([1.0, 10000 ** (-1 / 3), 10000 ** (-2 / 3), 1e-4]):
        torch.testing.assert_close(table[:, i], torch.sin(t * rate))
        torch.testing.assert_close(table[:, 4 + i], torch.cos(t * rate))
    assert (table[:, 8] == 0).all()


def test_shapes():
    model = autoencoder("softmax")
    ids = torch.randint(0, V, (B, T))
    pooled = model.encode(ids)
    hidden = model(ids)
    assert pooled.shape == (B, D) and hidden.shape == (B, T, D) and model.logits(hidden).shape == (B, T, V)
    torch.testing.assert_close(hidden, model.decode(pooled, T))
    assert model.state_size(T) == model.encoder.state_size(T)


@pytest.mark.parametrize("mixer", ["softmax", "hyena", "mamba"])
def test_outputs_depend_on_the_input_only_through_the_pooled_vector(mixer):
    """Two different sequences whose encoder state at the last position is forced to one vector give the
    same outputs at every position; the state at any other position changes nothing; the pooled vector
    itself reads every token (the first one too)."""
    model = autoencoder(mixer)
    a, b = torch.randint(0, V, (2, B, T))
    b[:, 0] = (a[:, 0] + 1) % V
    fixed = torch.randn(B, D)

    def force_last(module, args, hidden):
        return torch.cat([hidden[:, :-1], fixed[:, None]], dim=1)

    def scramble_others(module, args, hidden):
        return torch.cat([torch.randn_like(hidden[:, :-1]), hidden[:, -1:]], dim=1)

    with torch.no_grad():
        assert not torch.allclose(model.encode(a), model.encode(b))  # b differs from a in its first token only
        plain_a = model(a)
        hook = model.encoder.register_forward_hook(scramble_others)
        torch.testing.assert_close(model(a), plain_a, rtol=0, atol=0)
        hook.remove()
        hook = model.encoder.register_forward_hook(force_last)
        forced_a, forced_b = model(a), model(b)
        hook.remove()
    torch.testing.assert_close(forced_a, forced_b, rtol=0, atol=0)
    assert not torch.allclose(forced_a, plain_a)


def compression_config(**model):
    return {"task": {"name": "compression", "params": {"vocab_size": 8, "input_seq_len": 8},
                     "train": [{"num_examples": 512}], "test": [{"num_examples": 64}]},
            "model": {"d_model": 16, "n_layers": 2, "state_mixer": "mlp", "backbone": "autoencoder", **model},
            "train": {"batch_size": 64, "max_epochs": 2, "lr": 3e-3, "progress_bar": False}}


@pytest.mark.parametrize("task, backbone, needed",
                         [("mqar", "autoencoder", "lm"), ("compression", "lm", "autoencoder")])
def test_a_backbone_the_task_does_not_use_is_refused(task, backbone, needed, tmp_path, capsys):
    raw = compression_config(backbone=backbone)
    if task == "mqar":
        raw["task"] = {"name": "mqar", "params": {"vocab_size": 64, "input_seq_len": 16, "num_kv_pairs": 2}}
    with pytest.raises(ConfigError) as err:
        validate(make_run_config(raw))
    assert (err.value.key, err.value.value) == ("model.backbone", backbone) and repr(needed) in str(err.value)
    assert main([f"task.name={task}", f"model.backbone={backbone}", "--out", str(tmp_path)]) == 2
    assert "model.backbone" in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_an_unknown_backbone_is_refused():
    with pytest.raises(ConfigError) as err:
        make_run_config(compression_config(backbone="encoder-decoder"))
    assert err.value.key == "model.backbone" and "'lm' or 'autoencoder'" in str(err.value)


def test_compression_trains_end_to_end(tmp_path):
    """``python -m zoo.run`` of a tiny compression config: trains the autoencoder, writes its result."""
    cfg = make_run_config(compression_config())
    OmegaConf.save(cfg, tmp_path / "compression.yaml")
    assert main([str(tmp_path / "compression.yaml"), "--out", str(tmp_path / "out")]) == 0
    [result] = (tmp_path / "out").rglob("result.json")
    record = json.loads(result.read_text())
    assert record["status"] == "completed" and record["task"] == "compression" and record["epochs"] == 2
    assert record["settings"]["model.backbone"] == "autoencoder" and record["chance"] == pytest.approx(0.25)
    spec = validate(cfg)
    model = build_model(plain(cfg.model), spec.vocab_size, spec.max_seq_len)
    assert isinstance(model, AutoEncoder) and record["params"] == sum(p.numel() for p in model.parameters())
    losses = [h["train/loss"] for h in record["history"]]
    assert all(map(math.isfinite, losses)) and losses[1] < losses[0]
