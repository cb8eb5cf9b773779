"""train.timeout and worker failures: a run past its wall-clock limit is recorded as "timeout"; workers that
cannot start stop the sweep instead of being respawned forever."""
import sys

from zoo.config import make_run_config
from zoo.results import latest_records
from zoo.run import train
from zoo.scheduler import run_sweep
from zoo.sweep import load_sweep, main as sweep_main


def test_run_past_its_timeout_stops_after_the_epoch(tmp_path, tiny_base):
    raw = tiny_base(max_epochs=5, timeout=1e-3, early_stop_accuracy=None)
    record = train(make_run_config(raw), tmp_path, quiet=True)
    assert record["status"] == "timeout" and record["epochs"] == 1, record
    assert "train.timeout" in record["error"]


def test_hung_worker_is_stopped_and_its_run_recorded(write_sweep, tmp_path, faulty_mixers, tiny_base, monkeypatch):
    monkeypatch.setattr("zoo.backends.local.HANG_GRACE_S", 1.0)
    base = tiny_base()
    base["imports"] = [faulty_mixers]
    path = write_sweep(grid={"run": [{"model.mixer": "test_hang", "train.timeout": 1.0}, {"model.mixer": "softmax"}]},
                       base=base)
    assert sweep_main([str(path), "--cpu-workers", "2"]) == 0  # a timeout is final, not a failure
    records = {r["mixer"]: r for r in latest_records(tmp_path / "out")}
    assert records["test_hang"]["status"] == "timeout" and "stopped" in records["test_hang"]["error"]
    assert records["softmax"]["status"] == "completed"


def test_workers_that_cannot_start_stop_the_sweep(write_sweep, tmp_path, monkeypatch):
    sweep = load_sweep(write_sweep(grid={"model.mixer": ["softmax", "swa"]}))
    monkeypatch.setattr(sys, "executable", "/bin/false")  # every worker exits at once
    try:  # a worker that dies before its first group stops the sweep; one that dies holding a group fails it
        summary = run_sweep(sweep)
    except RuntimeError as err:
        assert "exit before training anything" in str(err)
    else:
        assert summary.failed == 2 and all("worker exited with code 1" in p for p in summary.problems)
