"""model.layers: a hybrid model gives each layer its own mixer; every layer's settings are checked."""
import pytest

from zoo.config import make_run_config, plain, record_fields, validate
from zoo.errors import ConfigError
from zoo.run import train
from zoo.spec import build_model

TASK = {"name": "mqar", "params": {"vocab_size": 64, "input_seq_len": 16, "num_kv_pairs": 2},
        "train": [{"num_examples": 128}], "test": [{"num_examples": 32}]}


def _cfg(**model):
    return make_run_config({"task": TASK, "model": {"d_model": 16, **model},
                            "train": {"batch_size": 32, "max_epochs": 1, "progress_bar": False}})


def test_each_layer_gets_its_mixer_and_the_run_is_named_after_them(tmp_path):
    cfg = _cfg(mixer="based", layers=[{}, {"mixer": "swa", "mixer_kwargs": {"window": 4}}])
    spec = validate(cfg)
    model = build_model(plain(cfg.model), spec.vocab_size, spec.max_seq_len)
    assert [type(b.mixer).__name__ for b in model.blocks] == ["Based", "SlidingWindowAttention"]
    assert model.blocks[1].mixer.window == 4 and model.pos_embed is not None  # swa wants learned positions
    record = train(cfg, tmp_path, quiet=True)
    assert record["status"] == "completed" and record["mixer"] == "based+swa"
    mamba = _cfg(mixer="mamba", layers=[{}, {}])
    assert record_fields(mamba, validate(mamba))["mixer"] == "mamba"


@pytest.mark.parametrize("layers, key", [
    ([{}], "model.layers"),                                                     # one entry for two layers
    ([{}, {"mixer": "sofmax"}], "model.layers[1].mixer"),                       # unknown mixer
    ([{}, {"mixer": "swa", "mixer_kwargs": {"windw": 4}}], "model.layers[1].mixer_kwargs.windw"),
    ([{}, {"mixr": "swa"}], "model.layers[1].mixr"),                            # unknown key
])
def test_bad_layers_are_config_errors(layers, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        validate(_cfg(mixer="based", layers=layers))
