"""Bad input fails before any training, naming the key, the value and the allowed values."""
import pytest

from zoo.config import make_run_config, plain, record_fields, resolve, run_id, settings_config, validate
from zoo.errors import ConfigError
from zoo.sweep import load_sweep, main as sweep_main


def check(raw, key, *fragments):
    with pytest.raises(ConfigError) as info:
        validate(make_run_config(raw))
    assert info.value.key == key
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize("raw, key, fragments", [
    ({"model": {"dmodel": 3}}, "model.dmodel", ["d_model", "n_layers"]),
    ({"model": {"mixer": "nope"}}, "model.mixer", ["'nope'", "softmax", "gatedfwa"]),
    ({"model": {"mixer": "swa", "mixer_kwargs": {"windw": 4}}}, "model.mixer_kwargs.windw", ["window"]),
    ({"model": {"mixer": "softmax", "mixer_kwargs": {"num_heads": 3}}}, "model.mixer_kwargs.num_heads", ["divisor"]),
    ({"train": {"precision": "fp16"}}, "train.precision", ["'fp16'", "bf16"]),
    ({"train": {"loggers": ["mlflow"]}}, "train.loggers", ["'mlflow'", "tensorboard"]),
    ({"train": {"lr": -1.0}}, "train.lr", ["-1.0"]),
    ({"task": {"name": "sudoku"}}, "task.name", ["'sudoku'", "mqar", "s5"]),
    ({"task": {"params": {"input_seq_len": 63}}}, "task.input_seq_len", ["63"]),
    ({"task": {"params": {"input_seq_len": 64, "num_kv_pairs": 17}}}, "task.num_kv_pairs", ["17"]),
    ({"task": {"params": {"vocab_size": 64, "input_seq_len": 64}}}, "task.vocab_size", ["64"]),
    ({"task": {"params": {"colour": 1}}}, "task.train[0].colour", ["num_kv_pairs"]),
    ({"task": {"train": [{"input_seq_len": 64}]}}, "task.train[0].num_examples", ["integer"]),
    ({"task": {"test": []}}, "task.test", ["non-empty"]),
    ({"imports": ["no_such_module_xyz"]}, "imports", ["no_such_module_xyz"]),
])
def test_bad_run_config(raw, key, fragments):
    check(raw, key, *fragments)


def test_wrong_type_names_key():
    with pytest.raises(ConfigError) as info:
        make_run_config({"model": {"d_model": "wide"}})
    assert info.value.key == "model.d_model" and "wide" in str(info.value)


def test_run_id_is_stable_and_order_free():
    a = make_run_config({"model": {"mixer": "swa", "d_model": 32}, "train": {"lr": 1e-3}})
    b = make_run_config({"train": {"lr": 1e-3}, "model": {"d_model": 32, "mixer": "swa"}})
    c = make_run_config({"model": {"mixer": "swa", "d_model": 64}, "train": {"lr": 1e-3}})
    assert run_id(a) == run_id(b) != run_id(c)
    assert len(run_id(a)) == 12


def test_a_key_added_later_keeps_earlier_run_ids():
    """model.embed_dropout came after results were committed: at the value earlier runs had (0) it stays out of the
    id, so they stay finished; at any other value, its default (Zoology's 0.1) included, it makes another run."""
    base = make_run_config({"model": {"mixer": "swa", "embed_dropout": 0.0}})
    earlier = plain(base)
    del earlier["model"]["embed_dropout"]
    assert run_id(base) == run_id(earlier)
    default = make_run_config({"model": {"mixer": "swa"}})
    assert default.model.embed_dropout == 0.1 and run_id(default) != run_id(base)


@pytest.mark.parametrize("raw", [
    {"model": {"mixer": "softmax", "mixer_kwargs": {"num_heads": 2}, "embed_dropout": 0.0}, "train": {"lr": 1e-3}},
    {"model": {"mixer": "hyena"}, "task": {"name": "mqar", "params": {"vocab_size": 64, "input_seq_len": 32},
                                          "train": [{"num_examples": 8, "num_kv_pairs": 2}], "test": [{"num_examples": 4}]}},
    {"train": {"betas": [0.9, 0.95], "loggers": ["csv"]}, "seed": 3},
])
def test_a_records_settings_give_back_its_config(raw):
    """``settings_config`` inverts the flattening of a record's ``settings``: lists from their JSON text, empty
    mappings, nested kwargs, and a key added later at its earlier value (left out of the settings)."""
    cfg = make_run_config(raw)
    settings = record_fields(cfg, validate(cfg))["settings"]
    assert settings_config(settings) == resolve(cfg) and run_id(settings_config(settings)) == run_id(cfg)


def test_sweep_grid_tied_axes_and_per_mixer_kwargs(write_sweep):
    path = write_sweep(
        grid={"model.mixer": ["softmax", "swa"],
              "shape": [{"task.params.input_seq_len": 16, "task.params.num_kv_pairs": 2, "train.batch_size": 32},
                        {"task.params.input_seq_len": 32, "task.params.num_kv_pairs": 4, "train.batch_size": 16}],
              "train.lr": [1e-3, 1e-2]},
        mixer_kwargs={"swa": {"window": 4}})
    sweep = load_sweep(path)
    assert len(sweep.runs) == 8
    shapes = {(r.cfg.task.params.input_seq_len, r.cfg.task.params.num_kv_pairs, r.cfg.train.batch_size)
              for r in sweep.runs}
    assert shapes == {(16, 2, 32), (32, 4, 16)}
    for r in sweep.runs:
        assert dict(r.cfg.model.mixer_kwargs) == ({"window": 4} if r.cfg.model.mixer == "swa" else {})
    pinned = load_sweep(path, ["model.mixer=swa", "train.max_epochs=3"])
    assert len(pinned.runs) == 4 and {r.cfg.model.mixer for r in pinned.runs} == {"swa"}
    assert all(r.cfg.train.max_epochs == 3 for r in pinned.runs)


@pytest.mark.parametrize("spec, key", [
    ({"grid": {"model.mixer": ["softmax", "bogus"]}}, "model.mixer"),
    ({"grid": {"model.d_model": 64}}, "grid.model.d_model"),
    ({"grid": {"lr": [1e-3]}}, "grid.lr"),
    ({"grid": {"model.mixer": ["softmax"]}, "outdir": "x"}, "sweep.outdir"),
    ({"grid": {"model.mixer": ["softmax"]}, "runs_per_gpu": 0}, "sweep.runs_per_gpu"),
])
def test_bad_sweep_fails_before_training(write_sweep, spec, key, capsys):
    grid = spec.pop("grid")
    path = write_sweep(grid=grid, **spec)
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    assert info.value.key == key
    assert sweep_main([str(path)]) == 2
    assert key in capsys.readouterr().err


def test_dry_run_and_list(write_sweep, capsys):
    path = write_sweep(grid={"model.mixer": ["softmax", "gatedfwa"]})
    assert sweep_main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 runs" in out and "model.mixer=gatedfwa" in out and "todo" in out
    assert sweep_main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "gatedfwa" in out and "mqar" in out and "s5" in out


@pytest.mark.parametrize("train, key, fragment", [
    ({"grad_clip": -1.0}, "train.grad_clip", "greater than 0"),
    ({"grad_clip": 0.0}, "train.grad_clip", "greater than 0"),
    ({"weight_decay": -1.0}, "train.weight_decay", "greater than or equal to 0"),
    ({"min_lr_ratio": 2.0}, "train.min_lr_ratio", "less than or equal to 1"),
    ({"betas": [0.9]}, "train.betas", "at least 2"),
    ({"betas": [0.9, 1.0]}, "train.betas", "less than 1"),
    ({"eval_batch_size": -1}, "train.eval_batch_size", "greater than or equal to 1"),
    ({"batch_size": "64"}, "train.batch_size", "integer"),
    ({"compile": 1}, "train.compile", "boolean"),
    ({"timeout": 0}, "train.timeout", "greater than 0"),
    ({"checkpoint": "yes"}, "train.checkpoint", "boolean"),
    ({"warmup_epochs": 5.0, "max_epochs": 2}, "train.warmup_epochs", "max_epochs"),
    ({"lr": float("nan")}, "train.lr", "finite"),
])
def test_every_train_key_has_a_type_and_a_range(train, key, fragment):
    check({"train": train}, key, fragment)


@pytest.mark.parametrize("raw, key", [
    ({"seed": -1}, "seed"),
    ({"seed": 2**40}, "seed"),
    ({"task": {"train": [{"num_examples": "512"}]}}, "task.train[0].num_examples"),
    ({"model": {"state_mixer": "gru"}}, "model.state_mixer"),
    ({"model": {"mixer": "softmax", "mixer_kwargs": {"num_heads": "1"}}}, "model.mixer_kwargs.num_heads"),
])
def test_types_are_strict(raw, key):
    check(raw, key)


def test_timeout_and_checkpoint_keys():
    cfg = make_run_config({"train": {"timeout": 30}})
    assert cfg.train.timeout == 30.0 and cfg.train.checkpoint is True
    assert make_run_config({}).train.timeout is None


def test_logger_without_its_package_is_refused(monkeypatch):
    import zoo.config

    monkeypatch.setitem(zoo.config.LOGGER_PACKAGES, "tensorboard", ("no_such_package_xyz",))
    check({"train": {"loggers": ["csv", "tensorboard"]}}, "train.loggers", "pip install no_such_package_xyz")


@pytest.mark.parametrize("mixer", ["test_last_dim_1", "test_length_1"])
def test_mixer_output_shape_is_checked(faulty_mixers, mixer):
    check({"imports": [faulty_mixers], "model": {"mixer": mixer, "d_model": 16}}, "model.mixer", mixer, "same shape")


def test_record_fields_use_the_training_length():
    from zoo.config import record_fields

    cfg = make_run_config({"task": {"name": "s5", "params": {"input_seq_len": 16},
                                    "train": [{"num_examples": 8}],
                                    "test": [{"num_examples": 8}, {"num_examples": 8, "input_seq_len": 64}]}})
    fields = record_fields(cfg, validate(cfg))
    assert fields["seq_len"] == 16
    assert fields["settings"]["task.params.input_seq_len"] == 16 and fields["settings"]["train.lr"] == 1e-3
