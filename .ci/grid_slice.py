"""One time-boxed slice of a sweep, on a machine whose disk does not outlive it (the device calls of a GPU session).

    python .ci/grid_slice.py sweeps/mqar.yaml --committed results/mqar --limit 575 --budget 1650 [--out DIR]

Trains the sweep's pending runs one at a time into ``--out`` (default ``outputs/<name>-slice``), a folder that stays
on the machine between calls and starts from ``--committed``'s records, so finished runs are skipped. Each step
picks, among the runs whose worst-case estimate fits in what is left of ``--budget`` (the seconds of calls left on
this machine, this call included), one from the cell with the fewest finished runs, the quickest first: no run is
cut off by the machine going back, and empty cells fill first. A run still going at ``--limit`` is interrupted
(SIGINT) and resumes from its last epoch's checkpoint in the next call on the same machine.

Estimate: ``max_epochs`` x seconds per epoch + 30 s of start-up. Seconds per epoch come from the committed records
of the same mixer (of the slowest mixer, for one without records) nearest in examples x N x d_model: their median
epoch per member of its group, per example x N x d_model, times this run's. Those records include groups that
shared a GPU, which makes it lean long; the slowest mixer's rate can still be short for a new mixer, and with no
records at all every run counts as fitting. Needs zoo importable (``.ci/gpu slice:<name>`` sets PYTHONPATH).

Writes ``<out>/new.jsonl``: the finished records ``--committed`` lacks, the ones to merge back.
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from zoo.results import final_records, read_jsonl
from zoo.sweep import load_sweep

START_S = 30  # process start, data, first-step compile


def size(config: dict) -> float:
    """Examples x N x d_model: what a run's epoch time grows with."""
    examples = sum(part["num_examples"] for part in config["task"]["train"])
    return examples * config["task"]["params"]["input_seq_len"] * config["model"]["d_model"]


def epoch_rates(records: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """Per mixer: (size, seconds per epoch per member of its group / size) of each record with epoch times."""
    rates: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        epochs = [h["train_seconds"] for h in r.get("history", []) if h.get("train_seconds")]
        if epochs:
            size_r = r["num_train_examples"] * r["seq_len"] * r["d_model"]
            rates.setdefault(r["mixer"], []).append((size_r, statistics.median(epochs) / r.get("group_size", 1) / size_r))
    return rates


def epoch_seconds(rates: list[tuple[float, float]], size_run: float) -> float:
    """Seconds per epoch at ``size_run``: the median rate of the records nearest in size (small cells pay a fixed
    cost per step, so a rate only carries to nearby sizes), times the size."""
    nearest = min(abs(math.log(s / size_run)) for s, _ in rates)
    return statistics.median(r for s, r in rates if abs(math.log(s / size_run)) <= nearest + 1e-9) * size_run


def selection(sweep, run) -> list[str]:
    """``--only`` options that select exactly ``run``: one key of each grid axis, with the run's value."""
    options = []
    for axis in sweep.axes:
        key = next(iter(axis.settings[0]))
        options += ["--only", f"{key}={OmegaConf.select(run.cfg, key)}"]
    return options


def train(sweep_path: str, out: Path, only: list[str], seconds: float) -> int:
    """Train one run, interrupted with SIGINT after ``seconds`` (then killed 20 s later if still going)."""
    cmd = [sys.executable, "-m", "zoo.sweep", sweep_path, "--out", str(out), "--runs-per-gpu", "1", *only]
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        try:
            _, err = proc.communicate(timeout=max(seconds, 1))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
    if proc.returncode not in (0, 130):
        print(err[-2000:], file=sys.stderr)
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python .ci/grid_slice.py", description=__doc__.splitlines()[0])
    parser.add_argument("sweep")
    parser.add_argument("--committed", required=True, help="folder whose results.jsonl holds the finished runs")
    parser.add_argument("--limit", type=float, required=True, help="seconds this call may train")
    parser.add_argument("--budget", type=float, help="seconds of calls left on this machine (default: --limit)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    t0, budget = time.monotonic(), args.budget or args.limit
    sweep = load_sweep(args.sweep, lazy=True)
    out = Path(args.out or f"outputs/{sweep.name}-slice")
    out.mkdir(parents=True, exist_ok=True)
    committed = Path(args.committed) / "results.jsonl"
    if not (out / "results.jsonl").exists() and committed.exists():
        (out / "results.jsonl").write_bytes(committed.read_bytes())
    committed_records = read_jsonl(committed)
    rates = epoch_rates(committed_records)
    spent_path = out / "slice_spent.json"
    spent = json.loads(spent_path.read_text()) if spent_path.exists() else {}
    slowest = max(rates, key=lambda m: statistics.median(r for _, r in rates[m]), default=None)
    runs = sweep.runs
    cell = {run.id: json.dumps({k: v for k, v in run.config.items() if k not in ("train", "seed")},
                               sort_keys=True) for run in runs}  # a cell: all but lr, seed and training
    tried = set()
    while True:
        done, elapsed = final_records(out), time.monotonic() - t0
        left = args.limit - elapsed - 25  # room to stop the run and write new.jsonl before the call ends
        finished = {c: 0 for c in cell.values()}
        for run in runs:
            finished[cell[run.id]] += run.id in done
        candidates = []
        for run in runs:
            if run.id in done or run.id in tried:
                continue
            known = rates.get(run.config["model"]["mixer"], rates.get(slowest))  # none yet: the slowest mixer's
            epoch = epoch_seconds(known, size(run.config)) if known else 0.0
            need = run.config["train"]["max_epochs"] * epoch + START_S - spent.get(run.id, 0)
            if need <= budget - elapsed:
                candidates.append((finished[cell[run.id]], need, run))
        if left < 60 or not candidates:
            break
        _, need, run = min(candidates, key=lambda c: c[:2])
        print(f"{elapsed:5.0f} s: {run.label} ({run.id}), needs about {need:.0f} s", flush=True)
        started = time.monotonic()
        code = train(args.sweep, out, selection(sweep, run), left)
        spent[run.id] = spent.get(run.id, 0) + time.monotonic() - started
        spent_path.write_text(json.dumps(spent))
        print(f"       exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code not in (0, 130):
            tried.add(run.id)  # a failing run is not tried again in this call
        if code == 130:
            break  # interrupted at the limit
    known = {r["id"] for r in committed_records}
    new = [r for r in final_records(out).values() if r["id"] not in known]
    (out / "new.jsonl").write_text("".join(json.dumps(r) + "\n" for r in new))
    for r in new:
        print(f"new: {r['id']} {r['mixer']} N={r['seq_len']} d={r['d_model']} lr={r['lr']} "
              f"{r['accuracy']:.3f} in {r['epochs']} epochs")
    print(f"{len(new)} new records in {out / 'new.jsonl'}; {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
