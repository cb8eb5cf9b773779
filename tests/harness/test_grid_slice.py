"""`.ci/grid_slice.py`, the GPU sessions' time-boxed slice of a sweep: it starts only runs that fit in the machine's
budget, skips what the committed folder holds, and hands back exactly the records that folder lacks."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("grid_slice", ROOT / ".ci" / "grid_slice.py")
grid_slice = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grid_slice)

SWEEP = """
name: tiny
base:
  task:
    name: mqar
    params: {vocab_size: 64, input_seq_len: 16, num_kv_pairs: 2}
    train: [{num_examples: 64}]
    test: [{num_examples: 32}]
  model: {d_model: 16, n_layers: 2}
  train: {batch_size: 32, max_epochs: 1, progress_bar: false}
grid:
  model.mixer: [softmax, swa]
  train.lr: [1.0e-3, 1.0e-2]
"""


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the runs' processes import zoo from the checkout
    path = tmp_path / "tiny.yaml"
    path.write_text(SWEEP)
    return path


def test_selection_picks_exactly_one_run(sweep):
    from zoo.sweep import load_sweep

    runs = load_sweep(sweep).runs
    for run in runs:
        only = grid_slice.selection(load_sweep(sweep), run)
        assert [r.id for r in load_sweep(sweep, only=only[1::2]).runs] == [run.id]


def test_estimate_takes_the_records_nearest_in_size():
    rates = [(100.0, 0.5), (1000.0, 0.01), (1100.0, 0.03)]
    assert grid_slice.epoch_seconds(rates, 1000.0) == pytest.approx(10.0)  # not the small record's 0.5 per unit
    assert grid_slice.epoch_seconds(rates, 120.0) == pytest.approx(60.0)


def test_slice_trains_what_fits_and_returns_only_new_records(sweep, tmp_path, capsys):
    committed, out = tmp_path / "committed", tmp_path / "out"
    committed.mkdir()
    args = [str(sweep), "--committed", str(committed), "--out", str(out), "--limit", "600"]
    assert grid_slice.main(args + ["--budget", "10"]) == 0  # 30 s of start-up do not fit in 10
    assert (out / "new.jsonl").read_text() == ""
    capsys.readouterr()

    first = [r for r in records(_train_all(sweep, tmp_path)) if r["mixer"] == "softmax"]
    (committed / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first))
    out2 = tmp_path / "out2"
    assert grid_slice.main(args[:4] + [str(out2), "--limit", "600"]) == 0
    new = records(out2 / "new.jsonl")
    assert sorted((r["mixer"], r["lr"]) for r in new) == [("swa", 1e-3), ("swa", 1e-2)]
    assert "model.mixer=softmax" not in capsys.readouterr().out  # the committed runs were not trained again


def _train_all(sweep, tmp_path):
    from zoo.sweep import main as sweep_main

    out = tmp_path / "all"
    assert sweep_main([str(sweep), "--out", str(out)]) == 0
    return out / "results.jsonl"
