"""Sweep files: every malformed one is a config error (exit 2), overrides are never dropped, seeds are
an axis, the expansion is lazy, and the dry run says what the sweep will do."""
import itertools
import json

import pytest
from omegaconf import OmegaConf

from zoo.config import run_id
from zoo.errors import ConfigError
from zoo.sweep import load_sweep, main as sweep_main

SHAPES = [{"task.params.input_seq_len": 16, "task.params.num_kv_pairs": 2, "train.batch_size": 64},
          {"task.params.input_seq_len": 32, "task.params.num_kv_pairs": 4, "train.batch_size": 32}]


def test_override_wins_over_a_tied_axis(write_sweep):
    path = write_sweep(grid={"shape": SHAPES, "train.lr": [1e-3, 1e-2]})
    plain = load_sweep(path)
    pinned = load_sweep(path, ["train.batch_size=8"])
    assert {r.cfg.train.batch_size for r in plain.runs} == {64, 32}
    assert {r.cfg.train.batch_size for r in pinned.runs} == {8}
    assert len(pinned.runs) == 4 and not {r.id for r in pinned.runs} & {r.id for r in plain.runs}
    assert {r.cfg.task.params.input_seq_len for r in pinned.runs} == {16, 32}


def test_mixer_kwargs_override_for_one_mixer(write_sweep):
    path = write_sweep(grid={"model.mixer": ["softmax", "gatedfwa"]}, mixer_kwargs={"gatedfwa": {"window": 8}})
    runs = {r.cfg.model.mixer: r.cfg for r in load_sweep(path, ["mixer_kwargs.gatedfwa.window=4"]).runs}
    assert dict(runs["gatedfwa"].model.mixer_kwargs) == {"window": 4}
    assert dict(runs["softmax"].model.mixer_kwargs) == {}


def test_seed_is_an_axis(write_sweep):
    by_grid = load_sweep(write_sweep(grid={"seed": [0, 1, 2], "model.mixer": ["softmax"]}))
    by_count = load_sweep(write_sweep(grid={"model.mixer": ["softmax"]}, seeds=3))
    assert [r.cfg.seed for r in by_grid.runs] == [0, 1, 2]
    assert [r.id for r in by_count.runs] == [r.id for r in by_grid.runs]
    assert load_sweep(write_sweep(grid={"model.mixer": ["softmax"]}, seeds=3), ["seed=1"]).count == 1


@pytest.mark.parametrize("change, key", [
    ({"grid": [1, 2]}, "sweep.grid"),
    ({"base": [1, 2]}, "sweep.base"),
    ({"out": 5}, "sweep.out"),
    ({"name": "../../x"}, "sweep.name"),
    ({"mixer_kwargs": {"softmax": 3}}, "mixer_kwargs.softmax"),
    ({"mixer_kwargs": {"sofmax": {"num_heads": 1}}}, "mixer_kwargs.sofmax"),
    ({"mixer_kwargs": {"swa": {"windw": 4}}}, "mixer_kwargs.swa.windw"),
    ({"grid": {"model.d_model": [16], "size": [{"model.d_model": 32}]}}, "grid.size"),
    ({"grid": {"shape": [{"lr": 1}]}}, "grid.shape.lr"),
    ({"grid": {"train.lr": [-1.0]}}, "train.lr"),
    ({"seeds": 0}, "sweep.seeds"),
])
def test_malformed_sweep_is_a_config_error(write_sweep, change, key, capsys):
    spec = {"grid": {"model.mixer": ["softmax"]}, **change}
    path = write_sweep(**spec)
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    assert info.value.key == key
    assert sweep_main([str(path), "--dry-run"]) == 2
    assert key in capsys.readouterr().err


@pytest.mark.parametrize("content", ["", "- a\n- b\n", "base: ${nope}\n", b"\x89PNG\x00\xff\xfe"])
def test_unreadable_sweep_file_is_a_config_error(tmp_path, content, capsys):
    path = tmp_path / "s.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert sweep_main([str(path), "--dry-run"]) == 2
    assert "error:" in capsys.readouterr().err
    assert sweep_main([str(tmp_path), "--dry-run"]) == 2  # a directory


def test_unwritable_output_folder_is_a_config_error(write_sweep, tmp_path, capsys):
    (tmp_path / "blocker").write_text("a file where the output folder should be")
    path = write_sweep(grid={"model.mixer": ["softmax"]}, out=str(tmp_path / "blocker" / "out"))
    assert sweep_main([str(path)]) == 2
    assert "out=" in capsys.readouterr().err


def test_a_million_runs_expand_lazily(write_sweep, capsys):
    grid = {"train.lr": [1e-3, 2e-3, 3e-3, 4e-3], "train.weight_decay": [0.0, 0.1, 0.2, 0.3],
            "seed": [0, 1, 2, 3], "train.batch_size": [8, 16, 32, 64], "train.max_epochs": [1, 2, 3, 4],
            "train.warmup_epochs": [0.0, 0.1, 0.2, 0.3], "train.min_lr_ratio": [0.0, 0.1, 0.2, 0.3],
            "train.grad_clip": [None, 1.0, 2.0, 3.0], "train.eval_batch_size": [None, 8, 16, 32],
            "model.d_model": [16, 24, 32, 40]}
    path = write_sweep(grid=grid)
    assert sweep_main([str(path), "--count"]) == 0
    assert capsys.readouterr().out.strip() == str(4 ** 10)
    sweep = load_sweep(path, lazy=True)
    first = list(itertools.islice(sweep.iter_runs(), 3))
    assert len({r.id for r in first}) == 3 and "runs" not in vars(sweep)  # nothing else was expanded


def test_duplicate_axis_values_are_one_run(write_sweep):
    sweep = load_sweep(write_sweep(grid={"model.mixer": ["softmax", "softmax"], "train.lr": [1e-3, 0.001]}))
    assert sweep.count == len(sweep.runs) == 1


def test_dry_run_agrees_with_the_sweep(write_sweep, tmp_path, capsys):
    """A logged run whose folder was deleted is done; a failed run is retried; others are todo."""
    path = write_sweep(grid={"model.d_model": [16, 24, 32]})
    a, b, c = load_sweep(path).runs
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text(json.dumps({"id": a.id, "status": "completed", "accuracy": 1.0}) + "\n"
                                       + json.dumps({"id": b.id, "status": "failed"}) + "\n")
    (out / "runs" / b.id).mkdir(parents=True)
    (out / "runs" / b.id / "result.json").write_text(json.dumps({"id": b.id, "status": "failed"}))
    assert sweep_main([str(path), "--dry-run"]) == 0
    lines = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines() if "  " in line}
    assert (lines[a.id], lines[b.id], lines[c.id]) == ("done", "retry", "todo")
    from zoo.results import final_records, reconcile

    assert set(final_records(out)) == set(reconcile(out)) == {a.id}


def test_run_ids_hash_the_resolved_config(write_sweep):
    run = load_sweep(write_sweep(grid={"model.mixer": ["softmax"]})).runs[0]
    assert run.id == run_id(run.cfg) == run_id(OmegaConf.to_container(run.cfg))


def test_only_selects_runs_without_changing_them(write_sweep):
    grid = {"shape": SHAPES, "model.mixer": ["softmax", "swa"], "train.lr": [1e-3, 1e-2]}
    path = write_sweep(grid=grid, mixer_kwargs={"swa": {"window": 8}})
    whole = {r.id: r.cfg for r in load_sweep(path).runs}
    part = load_sweep(path, only=["task.params.input_seq_len=32", "model.mixer=swa"])
    assert part.count == 2 and len(part.runs) == 2
    for run in part.runs:  # the same runs, ids and all: a slice now, the rest later
        assert run.id in whole and run.cfg.task.params.num_kv_pairs == 4 and run.cfg.model.mixer == "swa"
    assert {r.cfg.train.lr for r in load_sweep(path, only=["train.lr=1e-2"]).runs} == {0.01}  # 1e-2 read as 0.01
    assert len(load_sweep(path, only=["model.n_layers=1"]).runs) == 8  # a base key every run has: all of them
    both = load_sweep(path, only=["model.mixer=swa", "train.lr=1e-2", "model.mixer=softmax"])  # one key twice: either
    assert {(r.cfg.model.mixer, r.cfg.train.lr) for r in both.runs} == {("swa", 0.01), ("softmax", 0.01)}
    assert len(both.runs) == 4 and {r.id for r in both.runs} <= set(whole)


@pytest.mark.parametrize("item, allowed", [
    ("task.params.input_seq_len=100", "task.params.input_seq_len: 16, 32"),
    ("model.n_layers=3", "model.n_layers: 1"),
    ("lr=1", "a run-config key"),
    ("model.mixer", "key=value"),
    ("model.mixer=based", "model.mixer: 'softmax'"),  # one of a key's values that no run has is refused too
])
def test_only_that_selects_nothing_is_a_config_error(write_sweep, item, allowed, capsys):
    path = write_sweep(grid={"shape": SHAPES, "model.mixer": ["softmax"]})
    assert sweep_main([str(path), "--only", "model.mixer=softmax", "--only", item, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--only" in err and allowed in err


def test_a_sweep_that_extends_another(write_sweep, tmp_path):
    parent = write_sweep(grid={"model.mixer": ["softmax", "swa"], "train.lr": [1e-3, 1e-2]},
                         mixer_kwargs={"swa": {"window": 4}})
    child = tmp_path / "child.yaml"
    OmegaConf.save(OmegaConf.create({"extends": parent.name, "base": {"train": {"max_epochs": 3}},
                                     "grid": {"train.lr": [1e-4, 1e-3, 1e-2], "seed": [0, 1]}}), child)
    sweep = load_sweep(child)
    assert sweep.name == "child" and sweep.out.name == "child"  # never the parent's folder
    assert sweep.count == 2 * 3 * 2  # mixer kept, lr replaced in place, seed added at the end
    runs = sweep.runs
    assert [(r.cfg.model.mixer, r.cfg.train.lr, r.cfg.seed) for r in runs[:3]] == [("softmax", 1e-4, 0),
                                                                                  ("softmax", 1e-4, 1),
                                                                                  ("softmax", 1e-3, 0)]
    assert {r.cfg.train.max_epochs for r in runs} == {3}
    assert {r.cfg.task.params.input_seq_len for r in runs} == {r.cfg.task.params.input_seq_len
                                                               for r in load_sweep(parent).runs}  # base merged
    assert {dict(r.cfg.model.mixer_kwargs).get("window") for r in runs if r.cfg.model.mixer == "swa"} == {4}


@pytest.mark.parametrize("extends, fragment", [("missing.yaml", "existing YAML file"), ("self.yaml", "a cycle"),
                                               (3, "path of another sweep file")])
def test_bad_extends_names_the_key(write_sweep, tmp_path, extends, fragment):
    path = tmp_path / "self.yaml"
    OmegaConf.save(OmegaConf.create({"extends": extends, "grid": {"train.lr": [1e-3]}}), path)
    with pytest.raises(ConfigError, match="sweep.extends") as info:
        load_sweep(path)
    assert fragment in str(info.value)
