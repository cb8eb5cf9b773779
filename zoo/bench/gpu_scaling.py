"""Sweep throughput over GPUs: one slice of a sweep file trained by ``python -m zoo.sweep`` itself (its queue, its
persistent workers, one group per GPU at a time, longest first) on the first 1, 2, 4, ... GPUs this process sees,
each time into a fresh folder with early stopping off; the wall time of each and its speedup over one GPU.

Before the timed sweeps, the same slice trains one epoch on every GPU the section uses (:func:`warm_caches`), untimed:
it fills Triton's and Inductor's on-disk caches, so that no GPU count pays the kernels' compilation and the first
count timed is not the only one that does (which would flatter every count after it).

Beside the wall time, each count's records say how the time was spent: ``groups_s``, the groups' own seconds (from
the first member's start to the last member's end, added up over the groups), and ``outside_s``, the sweep's
seconds before its first group started and after its last one ended (its start-up, the workers' start, the
leaderboard): the same on any number of GPUs, so a slice whose groups are short shows little speedup.

On a machine without CUDA, that many CPU workers stand in for the GPUs: a check that the section runs, not a
measurement of anything a sweep on GPUs would see.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zoo.bench.grid_cost import by_cell, shared_keys
from zoo.devices import gpu_slots
from zoo.results import final_records, run_states


def time_spent(records: list[dict]) -> dict:
    """``groups_s``: the seconds of each group (the runs whose settings differ only in lr), from its first run's
    start to its last run's end, added up; ``span_s``: from the first start to the last end of all."""
    if not records:
        return {"groups_s": 0.0, "span_s": 0.0}
    groups = by_cell(records, shared_keys(records, {"train.lr"}))
    spans = [max(r["finished"] for r in g) - min(r["started"] for r in g) for g in groups.values()]
    return {"groups_s": sum(spans),
            "span_s": max(r["finished"] for r in records) - min(r["started"] for r in records)}


def sweep_wall_seconds(sweep: str, only: list[str], epochs: int, devices: int, cuda: bool) -> dict:
    """Train the runs of ``sweep`` that ``only`` (``KEY=VALUE`` filters, as ``--only``) selects for ``epochs`` epochs
    with early stopping off, on the first ``devices`` GPUs (or CPU workers), into a fresh folder.

    Returns the wall seconds of the ``zoo.sweep`` process (start-up and the leaderboard included), how many runs
    completed, the groups' seconds and the sweep's seconds outside them (see the module), or its exit code and the
    end of its output when it failed."""
    env = dict(os.environ)
    placement = ["--runs-per-gpu", "1"] if cuda else ["--cpu-workers", str(devices)]
    if cuda:
        import torch

        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_slots(torch.cuda.device_count())[:devices])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep"
        command = [sys.executable, "-m", "zoo.sweep", sweep, "--out", str(out), *placement,
                   *(f"--only={o}" for o in only), f"train.max_epochs={epochs}", "train.early_stop_accuracy=null"]
        t0 = time.perf_counter()
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        completed = sum(status == "completed" for status in run_states(out).values())
        spent = time_spent(list(final_records(out).values()))
    return {"devices": devices, "wall_s": wall, "completed": completed, "exit": proc.returncode,
            "groups_s": spent["groups_s"], "outside_s": wall - spent["span_s"],
            "error": "" if proc.returncode == 0 else (proc.stdout + proc.stderr)[-1000:]}


def warm_caches(sweep: str, only: list[str], devices: int, cuda: bool) -> dict:
    """One untimed epoch of the slice on ``devices`` GPUs: every kernel the slice runs is compiled and cached on
    disk before any count is timed (the sweeps' worker processes start with empty in-memory caches either way)."""
    return sweep_wall_seconds(sweep, only, 1, devices, cuda)


def device_counts(asked: list[int], available: int) -> list[int]:
    """1 (the baseline of the speedups) and the counts of ``asked`` up to ``available``, in order."""
    return sorted({1, *(k for k in asked if k <= available)})
