"""What a whole sweep costs on today's code, from two folders: a finished sweep (how many epochs each of its runs
trained before its early stop) and a short timing sweep of the same cells (how long each cell's group takes per
epoch now, early stopping off).

    python -m zoo.bench.grid_cost results/mqar results/mqar_timing [later timings ...] [--gpus 1,4,8] [--json cost.json]

A later timing folder of some cells (timed again after a change to their mixers) replaces those cells' timing and
keeps the others'; each group says which folder priced it. The timing folder comes from the same sweep file with
``train.max_epochs=2 train.early_stop_accuracy=null`` (every cell's group trains all its members for two epochs;
``--runs-per-gpu 1``, so no group shares its GPU). For each
group of the finished sweep (the runs of one cell that differ only in lr), with E its longest member's epochs and
a_e the members still training in epoch e, from the timing records of that cell:

    startup  the group's seconds outside training (data, models, worker set-up): wall seconds - training seconds
    first    what the first epoch costs above a later one (CUDA graph capture, autotuning, compilation), and the
             fit's seconds outside its epochs' training and test passes (Lightning, the checkpoints' copies and
             the wait for the last one's write)
    epoch    a later epoch's training seconds, all G members training
    eval     a later epoch's test pass (``test_seconds`` in the history); records written before zoo kept it: the
             fit's seconds not inside an epoch's training, per epoch, one-time costs included

    upper = startup + first + E (epoch + eval)                      members that stopped still cost (they do not)
    lower = startup + first + sum_e (epoch + eval) a_e / G          a group costs in proportion to its members

The truth lies between: a stopped member leaves the group's CUDA graph, but a group of 4 costs about 3x one run,
not 4x (``python -m zoo.bench.step``). The wall time on k GPUs is the longest-first schedule of those group times
over k GPUs, one group per GPU at a time, as ``python -m zoo.sweep`` queues them (ordered by measured cost here,
by its estimate there); no number of GPUs beats the longest group.
"""
from __future__ import annotations

import argparse
import heapq
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from zoo.bench import positive_counts
from zoo.results import final_records

# Keys that differ between the finished sweep and its timing sweep, or between the runs of one group.
NOT_CELL = {"train.lr", "train.max_epochs", "train.early_stop_accuracy", "train.timeout", "train.checkpoint",
            "train.progress_bar", "train.loggers"}

NAMED = (("model.mixer", "mixer"), ("task.params.input_seq_len", "N"), ("model.d_model", "d"), ("seed", "seed"))


def shared_keys(records: list[dict], leave_out: set[str]) -> list[str]:
    """The settings every record has, but ``leave_out``, sorted: the keys that tell records' cells apart."""
    return sorted(set.intersection(*(set(r["settings"]) for r in records)) - leave_out)


def by_cell(records: list[dict], keys: list[str]) -> dict[tuple, list[dict]]:
    """The records grouped by their values of the settings ``keys``."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        cells[tuple((k, json.dumps(r["settings"][k], sort_keys=True)) for k in keys)].append(r)
    return cells


def cell_timing(records: list[dict]) -> dict:
    """Seconds of one cell's timing group (its members' records, at least two epochs each)."""
    r = max(records, key=lambda rec: rec["wall_seconds"])  # the members share the epochs; the last one out
    epochs = [h["train_seconds"] for h in r["history"]]
    if len(epochs) < 2:
        raise ValueError(f"timing run {r['id']} trained {len(epochs)} epoch(s): the timing sweep needs at least 2")
    epoch = statistics.median(epochs[1:])
    first = max(0.0, epochs[0] - epoch)
    outside = r["train_seconds"] - sum(epochs)  # the fit's seconds outside the epochs' training
    tests = [h.get("test_seconds") for h in r["history"]]
    if None in tests:
        evaluation = max(0.0, outside / len(epochs))
    else:  # a later epoch's test pass; the first one's extra (graph capture) and the rest are paid once
        evaluation = statistics.median(tests[1:])
        first += max(0.0, outside - evaluation * len(epochs))
    return {"group_size": len(records), "epoch": epoch, "first": first, "eval": evaluation,
            "startup": max(0.0, r["wall_seconds"] - r["train_seconds"])}


def group_seconds(member_epochs: list[int], t: dict) -> tuple[float, float]:
    """(upper, lower) seconds of a group whose members trained ``member_epochs`` epochs, by timing ``t``."""
    longest = max(member_epochs)
    per_epoch = t["epoch"] + t["eval"]
    fixed = t["startup"] + t["first"]
    active = sum(sum(e > epoch for e in member_epochs) for epoch in range(longest))
    return fixed + longest * per_epoch, fixed + per_epoch * active / t["group_size"]


def makespan(seconds: list[float], gpus: int) -> float:
    """Wall seconds of the jobs ``seconds`` on ``gpus`` GPUs, longest first, each to the first GPU free."""
    free = [0.0] * gpus
    for s in sorted(seconds, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + s)
    return max(free)


def grid_cost(protocol: Path, *timings: Path) -> dict:
    """Every group of the finished sweep ``protocol`` priced by the timing sweeps ``timings`` (see the module): a
    cell timed in several of them takes its timing from the last, so a later timing of some cells (after a change
    to their mixers, say) replaces theirs alone. Each group names the folder that priced it."""
    done = [r for r in final_records(protocol).values() if r.get("settings")]
    if not done:
        raise ValueError(f"no finished runs in {protocol}")
    timed = {}
    for timing in timings:
        timed[timing] = [r for r in final_records(timing).values() if r.get("settings") and r["status"] == "completed"]
        if not timed[timing]:
            raise ValueError(f"no finished runs in {timing}")
    keys = shared_keys(done + [r for rs in timed.values() for r in rs], NOT_CELL)
    cell_timings = {cell: (cell_timing(rs), str(timing))
                    for timing, records in timed.items() for cell, rs in by_cell(records, keys).items()}
    groups, missing = [], []
    for cell, rs in by_cell(done, keys).items():
        settings = dict(cell)
        name = ", ".join(f"{short}={json.loads(settings[k])}" for k, short in NAMED if k in settings)
        if cell not in cell_timings:
            missing.append(name)
            continue
        t, timing = cell_timings[cell]
        upper, lower = group_seconds([r["epochs"] for r in rs], t)
        groups.append({"cell": name, "mixer": rs[0]["mixer"], "runs": len(rs), "epochs": max(r["epochs"] for r in rs),
                       "run_epochs": sum(r["epochs"] for r in rs), "upper_s": upper, "lower_s": lower,
                       "timing": timing, **{f"{k}_s": v for k, v in t.items() if k != "group_size"}})
    devices = sorted({r.get("device", "?") for rs in timed.values() for r in rs})
    return {"groups": groups, "missing": missing, "devices": devices}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.bench.grid_cost", description=__doc__.splitlines()[0])
    parser.add_argument("protocol", type=Path, help="a finished sweep's folder (its runs' epochs)")
    parser.add_argument("timings", type=Path, nargs="+",
                        help="the same cells trained a few epochs, early stopping off; where several folders time "
                             "a cell, the last one's timing counts")
    parser.add_argument("--gpus", type=positive_counts, default="1,4,8", help="GPU counts to schedule the groups on")
    parser.add_argument("--json", type=Path, help="also write every group's numbers to this file")
    args = parser.parse_args(argv)
    try:
        cost = grid_cost(args.protocol, *args.timings)
    except ValueError as e:
        print(f"grid_cost: {e}", file=sys.stderr)
        return 2
    groups = cost["groups"]
    sources = ""
    if len(args.timings) > 1:
        counts = {str(t): sum(g["timing"] == str(t) for g in groups) for t in args.timings}
        sources = " (" + ", ".join(f"{n} timed in {t}" for t, n in counts.items()) + ")"
    print(f"timed on: {', '.join(cost['devices'])}; {len(groups)} groups priced{sources}"
          + (f", {len(cost['missing'])} without a timing: {'; '.join(cost['missing'])}" if cost["missing"] else ""))
    by_mixer: dict[str, list[dict]] = defaultdict(list)
    for g in groups:
        by_mixer[g["mixer"]].append(g)
    print(f"{'mixer':>10} {'groups':>6} {'epochs':>7} {'run-epochs':>10} {'GPU-h upper':>11} {'GPU-h lower':>11}")
    for mixer, gs in sorted(by_mixer.items(), key=lambda kv: -sum(g["upper_s"] for g in kv[1])):
        print(f"{mixer:>10} {len(gs):>6} {sum(g['epochs'] for g in gs):>7} {sum(g['run_epochs'] for g in gs):>10} "
              f"{sum(g['upper_s'] for g in gs) / 3600:>11.2f} {sum(g['lower_s'] for g in gs) / 3600:>11.2f}")
    upper = [g["upper_s"] for g in groups]
    lower = [g["lower_s"] for g in groups]
    print(f"{'all':>10} {len(groups):>6} {sum(g['epochs'] for g in groups):>7} "
          f"{sum(g['run_epochs'] for g in groups):>10} {sum(upper) / 3600:>11.2f} {sum(lower) / 3600:>11.2f}")
    longest = max(groups, key=lambda g: g["upper_s"])
    print(f"longest group: {longest['cell']}, {longest['epochs']} epochs, {longest['upper_s'] / 60:.1f} min "
          f"(upper; {longest['lower_s'] / 60:.1f} lower): no number of GPUs finishes the grid sooner")
    for k in args.gpus:
        print(f"wall on {k} GPU(s), longest first: {makespan(upper, k) / 3600:.2f} h upper, "
              f"{makespan(lower, k) / 3600:.2f} h lower")
    if args.json:
        args.json.write_text(json.dumps(cost, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
