"""Sweeps: finished runs stay finished, failures are isolated, kills are survived, one owner per folder."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoo.results import SweepLock, SweepLocked, latest_records, read_jsonl
from zoo.scheduler import run_sweep
from zoo.sweep import load_sweep, main as sweep_main


def statuses(out: Path) -> dict:
    return {r["id"]: r["status"] for r in latest_records(out)}


def test_rerun_skips_finished_runs(write_sweep, tmp_path, capsys):
    path = write_sweep(grid={"model.mixer": ["softmax", "swa"]})
    assert sweep_main([str(path)]) == 0
    out = tmp_path / "out"
    first = {r["id"]: r["started"] for r in read_jsonl(out / "results.jsonl")}
    assert len(first) == 2 and set(statuses(out).values()) == {"completed"}
    for run_id in first:
        run_dir = out / "runs" / run_id
        assert (run_dir / "config.yaml").exists() and (run_dir / "metrics.csv").exists()
        assert json.loads((run_dir / "result.json").read_text())["status"] == "completed"
    assert (out / "leaderboard.csv").exists() and (out / "recall_grid.png").exists()
    capsys.readouterr()
    assert sweep_main([str(path)]) == 0
    assert "2 skipped" in capsys.readouterr().out
    again = read_jsonl(out / "results.jsonl")
    assert {r["id"]: r["started"] for r in again} == first and len(again) == 2


def test_failures_are_recorded_and_the_sweep_goes_on(write_sweep, tmp_path, faulty_mixers, tiny_base, capsys):
    base = tiny_base()
    base["imports"] = [faulty_mixers]
    path = write_sweep(grid={"model.mixer": ["test_raises", "softmax", "test_nan", "test_oom", "test_crash"]},
                       base=base)
    assert sweep_main([str(path)]) == 1  # non-zero: some runs failed
    out = tmp_path / "out"
    by_mixer = {r["mixer"]: r for r in latest_records(out)}
    assert by_mixer["softmax"]["status"] == "completed"
    assert by_mixer["test_raises"]["status"] == "failed"
    assert "this mixer always fails" in by_mixer["test_raises"]["error"]
    assert by_mixer["test_nan"]["status"] == "diverged"
    assert by_mixer["test_oom"]["status"] == "failed"
    assert by_mixer["test_oom"]["error"].startswith("CUDA out of memory")
    assert by_mixer["test_crash"]["status"] == "failed" and "code 17" in by_mixer["test_crash"]["error"]
    summary = capsys.readouterr().out
    assert "3 failed" in summary and "1 diverged" in summary and "test_raises" in summary


def test_a_native_crash_records_the_python_stack(write_sweep, tmp_path, faulty_mixers, tiny_base):
    """A worker killed by SIGSEGV: the run's error holds faulthandler's stack of the crashing thread (which mixer,
    which line), not the end of the worker's log."""
    base = tiny_base()
    base["imports"] = [faulty_mixers]
    assert sweep_main([str(write_sweep(grid={"model.mixer": ["test_segfault"]}, base=base))]) == 1
    error = latest_records(tmp_path / "out")[0]["error"]
    assert error.startswith("worker exited with code -11\nFatal Python error: Segmentation fault")
    assert "faulty_mixers.py" in error and "in forward" in error and "Extension modules" not in error


def test_a_group_out_of_gpu_memory_beside_others_is_queued_again(write_sweep, tmp_path, faulty_mixers, tiny_base,
                                                                 monkeypatch, capsys):
    """Two workers on one (pretended) GPU: the run that ran out of memory is trained again, not recorded failed;
    alone on its GPU (one worker) it is recorded failed at once."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # workers get CUDA_VISIBLE_DEVICES=0 and use the CPU
    monkeypatch.setenv("ZOO_TEST_OOM_MARK", str(tmp_path / "oom-mark"))
    base = tiny_base()
    base["imports"] = [faulty_mixers]
    sweep = load_sweep(write_sweep(grid={"model.mixer": ["test_oom_once", "softmax"]}, base=base))
    run_sweep(sweep, runs_per_gpu=2)
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert sorted(r["status"] for r in records) == ["completed", "completed"]  # one line per run, no failure
    assert "ran out of GPU memory beside other runs; queued again (try 2 of 3)" in capsys.readouterr().out

    (tmp_path / "oom-mark").unlink()
    monkeypatch.setattr(sweep, "out", tmp_path / "alone")
    run_sweep(sweep, runs_per_gpu=1)
    by_mixer = {r["mixer"]: r for r in read_jsonl(tmp_path / "alone" / "results.jsonl")}
    assert by_mixer["test_oom_once"]["status"] == "failed"
    assert by_mixer["test_oom_once"]["error"].startswith("CUDA out of memory")


@pytest.mark.parametrize("visible, slots", [(None, ["0", "1", "0", "1"]), ("5,7", ["5", "7", "5", "7"]),
                                            ("GPU-aa, GPU-bb,3", ["GPU-aa", "GPU-bb", "GPU-aa", "GPU-bb"])])
def test_workers_take_the_gpus_the_sweep_was_given(monkeypatch, tmp_path, visible, slots):
    """Two workers per GPU on the GPUs this process sees: a sweep started with CUDA_VISIBLE_DEVICES=5,7 puts its
    workers on GPUs 5 and 7 (each worker's CUDA_VISIBLE_DEVICES), not on 0 and 1, which may be someone else's."""
    import torch

    from zoo.backends import Options, local

    class Started(Exception):
        pass

    given = []

    class Recorder:  # stands in for a worker process: records its slot; the fourth stops the sweep
        def __init__(self, slot, threads, log):
            given.append(slot)
            if len(given) == len(slots):
                raise Started

        def stop(self):  # the pool stops the ones it started when one fails to start
            pass

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(local, "Worker", Recorder)
    with pytest.raises(Started):
        local.start(tmp_path, Options(runs_per_gpu=2))
    assert given == slots


def test_workers_get_expandable_segments_unless_the_user_chose_an_allocator(monkeypatch, tmp_path):
    """Workers sharing a GPU run with PyTorch's expandable segments (less fragmentation as their caches come and
    go); a PYTORCH_CUDA_ALLOC_CONF the user set is passed on untouched."""
    from zoo.backends import local

    class Spawned(Exception):
        pass

    envs = []

    def popen(args, env, **kwargs):
        envs.append(env)
        raise Spawned

    monkeypatch.setattr(local.subprocess, "Popen", popen)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    with pytest.raises(Spawned):
        local.Worker("0", 1, tmp_path / "a.log")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")
    with pytest.raises(Spawned):
        local.Worker("0", 1, tmp_path / "b.log")
    assert [env["PYTORCH_CUDA_ALLOC_CONF"] for env in envs] == ["expandable_segments:True", "max_split_size_mb:64"]
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == "0"


def test_failed_runs_are_retried_and_finished_ones_kept(write_sweep, tmp_path, faulty_mixers, tiny_base):
    base = tiny_base()
    base["imports"] = [faulty_mixers]
    path = write_sweep(grid={"model.mixer": ["softmax", "test_raises"]}, base=base)
    sweep = load_sweep(path)
    run_sweep(sweep)
    run_sweep(sweep)
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    completed = [r for r in records if r["status"] == "completed"]
    assert len(completed) == 1  # not redone
    assert [r["status"] for r in records if r["mixer"] == "test_raises"] == ["failed", "failed"]  # retried


def test_second_sweep_on_same_folder_is_refused(write_sweep, tmp_path, capsys):
    path = write_sweep(grid={"model.mixer": ["softmax"]})
    with SweepLock(tmp_path / "out"):
        with pytest.raises(SweepLocked):
            run_sweep(load_sweep(path))
        assert sweep_main([str(path)]) == 3
    assert "another sweep" in capsys.readouterr().err
    assert not (tmp_path / "out" / "results.jsonl").exists()


def _default_sigint() -> None:
    """A test runner started in the background ignores SIGINT, and its children inherit that; undo it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_sweep_resumes_without_duplicates(write_sweep, tmp_path, faulty_mixers, tiny_base, monkeypatch, sig):
    """Kill the sweep while one run is held back (it waits for a file to vanish) and the 6 others are logged:
    no race with the clock. The rerun trains only the held-back run and logs nothing twice."""
    wait_file = tmp_path / "hold"
    wait_file.touch()
    monkeypatch.setenv("ZOO_TEST_WAIT_FILE", str(wait_file))
    base = tiny_base()
    base["imports"] = [faulty_mixers]
    runs = [{"model.mixer": m, "model.d_model": d} for m in ("softmax", "swa", "gatedfwa", "softmax") for d in (16, 24)]
    path = write_sweep(grid={"run": runs[:6] + [{"model.mixer": "test_wait_for_file", "model.d_model": 16}] + runs[6:]},
                       base=base)  # 7 distinct runs (the second softmax pair dedups)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "zoo.sweep", str(path), "--cpu-workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_default_sigint)
    deadline = time.time() + 300
    while len(read_jsonl(out / "results.jsonl")) < 6 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(sig)
    proc.wait(timeout=120)
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 130)
    before = {r["id"]: r["started"] for r in read_jsonl(out / "results.jsonl")}
    assert len(before) == 6 and "test_wait_for_file" not in {r["mixer"] for r in read_jsonl(out / "results.jsonl")}
    wait_file.unlink()
    assert sweep_main([str(path)]) == 0
    records = read_jsonl(out / "results.jsonl")
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == 7
    assert all(r["status"] == "completed" for r in records)
    assert {i: s for i, s in ((r["id"], r["started"]) for r in records) if i in before} == before


def test_a_member_that_stops_early_is_kept_when_its_group_is_killed(write_sweep, tmp_path, faulty_mixers, tiny_base,
                                                                    monkeypatch):
    """A group of two lrs: one diverges in epoch 0, the other is held in epoch 1 (no race with the clock). The
    diverged member's result is written while its group still trains, so killing the sweep then loses nothing; the
    rerun trains only the other member."""
    wait_file = tmp_path / "hold"
    wait_file.touch()
    monkeypatch.setenv("ZOO_TEST_WAIT_FILE", str(wait_file))
    # epoch 0: 4 training steps of both members and 1 test batch of the member left, one forward each; the 10th call
    # is in epoch 1
    monkeypatch.setenv("ZOO_TEST_WAIT_AFTER", "9")
    base = tiny_base(max_epochs=3)
    base["imports"] = [faulty_mixers]
    base["model"]["mixer"] = "test_wait_after_first_epoch"
    path = write_sweep(grid={"train.lr": [1e-3, 1e30]}, base=base)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "zoo.sweep", str(path), "--cpu-workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_default_sigint)
    deadline = time.time() + 300
    while not read_jsonl(out / "results.jsonl") and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)
    (diverged,) = read_jsonl(out / "results.jsonl")
    assert diverged["status"] == "diverged" and diverged["lr"] == 1e30
    assert json.loads((out / "runs" / diverged["id"] / "result.json").read_text())["status"] == "diverged"
    wait_file.unlink()
    assert sweep_main([str(path)]) == 0
    records = read_jsonl(out / "results.jsonl")
    assert [r["id"] for r in records][0] == diverged["id"] and len({r["id"] for r in records}) == len(records) == 2
    assert records[1]["status"] == "completed" and records[1]["epochs"] == 3


def test_result_json_written_but_not_logged_is_repaired(write_sweep, tmp_path):
    """A sweep killed between writing result.json and appending results.jsonl loses nothing."""
    path = write_sweep(grid={"model.mixer": ["softmax"]})
    run_sweep(load_sweep(path))
    out = tmp_path / "out"
    (out / "results.jsonl").unlink()
    summary = run_sweep(load_sweep(path))
    assert summary.counts["skipped (already finished)"] == 1
    assert len(read_jsonl(out / "results.jsonl")) == 1


def test_workers_start_while_the_runs_are_checked_and_a_refused_sweep_leaves_nothing(write_sweep, tmp_path,
                                                                                    monkeypatch, capsys):
    """The workers start before the sweep expands and checks its runs, so their imports overlap the check; a run
    the check refuses (here 16 channels do not split into 3 heads, which no single value shows) stops them, exits
    2 and leaves no output folder behind."""
    import zoo.sweep
    from zoo.backends import local

    events, pools = [], []

    def start(out, options):
        events.append("workers")
        pools.append(real_start(out, options))
        return pools[-1]

    def check_run(config):
        events.append("check")
        return real_check(config)

    real_start, real_check = local.start, zoo.sweep.check_run
    monkeypatch.setattr(local, "start", start)
    monkeypatch.setattr(zoo.sweep, "check_run", check_run)
    path = write_sweep(grid={"model.mixer": ["softmax"]}, mixer_kwargs={"softmax": {"num_heads": 3}})
    assert sweep_main([str(path)]) == 2
    assert events == ["workers", "check"]
    assert "in run model.mixer=softmax" in capsys.readouterr().err
    assert [w.proc.poll() is not None for w in pools[0].workers] == [True]
    assert not (tmp_path / "out").exists()
