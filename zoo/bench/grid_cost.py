"""What a whole sweep costs on today's code, from two folders: a finished sweep (how many epochs each of its runs
trained before its early stop) and a short timing sweep of the same cells (how long each cell's group takes per
epoch now, early stopping off).

    python -m zoo.bench.grid_cost results/mqar results/mqar_timing [later timings ...] [--gpus 1,4,8] [--json cost.json]
        [--epochs softmax]   (also: a later epoch of every cell timed, per group size, against softmax's)

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
not 4x (``python -m zoo.bench.step``). Where the cell was also timed with fewer members at once (the same sweep
with ``--only train.lr=...`` once per lr kept, into its own folder: groups of 1, 2, ...), the cost of an epoch with
a_e members still training is read off the measured sizes, piecewise linear in the number of members (linear
beyond the last two sizes):

    estimate = startup + first + sum_e cost(a_e)                   cost(k): (epoch + eval) of k members at once

A folder's groups have the size their records say (``group_size``). The wall time on k GPUs is the longest-first
schedule of those group times over k GPUs, one group per GPU at a time, as ``python -m zoo.sweep`` queues them
(ordered by measured cost here, by its estimate there); no number of GPUs beats the longest group.
"""
from __future__ import annotations

import argparse
import heapq
import json
import re
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
    """Seconds of one cell's timing group (its members' records, at least two epochs each), and its size: the
    members that trained at once (``group_size`` of the records; records written before zoo kept it: how many)."""
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
    return {"group_size": max(rec.get("group_size", len(records)) for rec in records), "epoch": epoch, "first": first,
            "eval": evaluation, "startup": max(0.0, r["wall_seconds"] - r["train_seconds"])}


def group_seconds(member_epochs: list[int], t: dict) -> tuple[float, float]:
    """(upper, lower) seconds of a group whose members trained ``member_epochs`` epochs, by timing ``t``."""
    longest = max(member_epochs)
    per_epoch = t["epoch"] + t["eval"]
    fixed = t["startup"] + t["first"]
    active = sum(sum(e > epoch for e in member_epochs) for epoch in range(longest))
    return fixed + longest * per_epoch, fixed + per_epoch * active / t["group_size"]


def epoch_cost(sizes: dict[int, dict], members: int) -> float:
    """Seconds of an epoch (training and test pass) with ``members`` training at once, from the timings of the
    group sizes ``sizes`` (at least two): piecewise linear between measured sizes, linear beyond the last two."""
    points = sorted((k, t["epoch"] + t["eval"]) for k, t in sizes.items())
    i = next((j for j in range(1, len(points) - 1) if members <= points[j][0]), len(points) - 1)
    (k0, c0), (k1, c1) = points[i - 1], points[i]
    return c0 + (c1 - c0) * (members - k0) / (k1 - k0)


def estimated_seconds(member_epochs: list[int], sizes: dict[int, dict]) -> float:
    """Seconds of a group whose members trained ``member_epochs`` epochs, each epoch priced by the members still
    training (``epoch_cost``); the one-time seconds from the largest size's timing."""
    full = sizes[max(sizes)]
    return full["startup"] + full["first"] + sum(
        epoch_cost(sizes, sum(e > epoch for e in member_epochs)) for epoch in range(max(member_epochs)))


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
    # cell -> group size -> (timing, folder): a later folder replaces a cell's timing at the sizes it times
    cell_timings: dict[tuple, dict[int, tuple[dict, str]]] = defaultdict(dict)
    for timing, records in timed.items():
        for cell, rs in by_cell(records, keys).items():
            t = cell_timing(rs)
            cell_timings[cell][t["group_size"]] = t, str(timing)
    groups, missing = [], []
    for cell, rs in by_cell(done, keys).items():
        name = cell_name(dict(cell))
        if cell not in cell_timings:
            missing.append(name)
            continue
        sizes = {k: t for k, (t, _) in cell_timings[cell].items()}
        t, timing = cell_timings[cell][max(sizes)]
        member_epochs = [r["epochs"] for r in rs]
        upper, lower = group_seconds(member_epochs, t)
        estimate = estimated_seconds(member_epochs, sizes) if len(sizes) > 1 else None
        groups.append({"cell": name, "mixer": rs[0]["mixer"], "runs": len(rs), "epochs": max(member_epochs),
                       "run_epochs": sum(member_epochs), "upper_s": upper, "lower_s": lower, "estimate_s": estimate,
                       "timing": timing, "timings": {k: folder for k, (_, folder) in sorted(cell_timings[cell].items())},
                       **{f"{k}_s": v for k, v in t.items() if k != "group_size"}})
    devices = sorted({r.get("device", "?") for rs in timed.values() for r in rs})
    epochs = [{"cell": cell_name(dict(cell), mixer=False), "mixer": json.loads(dict(cell)["model.mixer"]), "members": k,
               "epoch_s": t["epoch"]}
              for cell, sizes in cell_timings.items() for k, (t, _) in sorted(sizes.items())]
    return {"groups": groups, "missing": missing, "devices": devices, "epochs": epochs}


def cell_name(settings: dict, mixer: bool = True) -> str:
    """A cell's short name from its settings (json values), e.g. "mixer=mamba, N=512, d=512, seed=0"."""
    return ", ".join(f"{short}={json.loads(settings[k])}" for k, short in NAMED
                     if k in settings and (mixer or short != "mixer"))


def cell_order(name: str) -> list[int]:
    """Sort key of ``cell_name``s: by N, then d (their numbers in order)."""
    return [int(n) for n in re.findall(r"\d+", name)]


def size_tables(epochs: list[dict], mixers: list[str], title: str, entry, width: int) -> list[str]:
    """Lines of a table per group size timed in ``epochs`` (``grid_cost``'s): ``title`` with the size's members
    for ``{members}``, then a row per cell (by N, then d) and a column per mixer of ``mixers``, each entry
    ``entry(cell, mixer, members, at)`` ("-" for None), where ``at[(cell, mixer)]`` is that size's epoch seconds."""
    lines = []
    for members in sorted({e["members"] for e in epochs}):
        at = {(e["cell"], e["mixer"]): e["epoch_s"] for e in epochs if e["members"] == members}
        lines.append(title.format(members=members))
        lines.append(f"{'cell':<22}" + "".join(f"{m:>{width}}" for m in mixers))
        for cell in sorted({c for c, _ in at}, key=cell_order):
            texts = [entry(cell, m, members, at) for m in mixers]
            lines.append(f"{cell:<22}" + "".join(f"{'-' if t is None else t:>{width}}" for t in texts))
    return lines


def epoch_table(epochs: list[dict], against: str) -> list[str]:
    """Lines of a table per group size timed: a later epoch's training seconds of each cell (rows) and mixer
    (columns), and its ratio to ``against``'s at the same cell and size."""
    def entry(cell: str, mixer: str, members: int, at: dict) -> str | None:
        s, base = at.get((cell, mixer)), at.get((cell, against))
        return None if s is None else f"{s:.2f}" + ("" if base is None else f" ({s / base:.2f})")

    mixers = sorted({e["mixer"] for e in epochs}, key=lambda m: (m != against, m))
    return size_tables(epochs, mixers, f"a later epoch's training, s, {{members}} member(s) at once (x {against}):",
                       entry, 16)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.bench.grid_cost", description=__doc__.splitlines()[0])
    parser.add_argument("protocol", type=Path, help="a finished sweep's folder (its runs' epochs)")
    parser.add_argument("timings", type=Path, nargs="+",
                        help="the same cells trained a few epochs, early stopping off; where several folders time "
                             "a cell, the last one's timing counts")
    parser.add_argument("--gpus", type=positive_counts, default="1,4,8", help="GPU counts to schedule the groups on")
    parser.add_argument("--json", type=Path, help="also write every group's numbers to this file")
    parser.add_argument("--epochs", metavar="MIXER",
                        help="also print a later epoch of every cell timed, per group size, and its ratio to MIXER's")
    args = parser.parse_args(argv)
    try:
        cost = grid_cost(args.protocol, *args.timings)
    except ValueError as e:
        print(f"grid_cost: {e}", file=sys.stderr)
        return 2
    timed_mixers = sorted({e["mixer"] for e in cost["epochs"]})
    if args.epochs is not None and args.epochs not in timed_mixers:
        print(f"grid_cost: --epochs={args.epochs} is not valid: expected one of the timed mixers {timed_mixers}",
              file=sys.stderr)
        return 2
    groups = cost["groups"]
    sources = ""
    if len(args.timings) > 1:
        counts = {str(t): sum(str(t) in g["timings"].values() for g in groups) for t in args.timings}
        sources = " (" + ", ".join(f"{n} timed in {t}" for t, n in counts.items()) + ")"
    print(f"timed on: {', '.join(cost['devices'])}; {len(groups)} groups priced{sources}"
          + (f", {len(cost['missing'])} without a timing: {'; '.join(cost['missing'])}" if cost["missing"] else ""))
    columns = ["upper", "lower"]
    unestimated = sum(g["estimate_s"] is None for g in groups)
    if unestimated == 0:
        columns.append("estimate")
    elif unestimated < len(groups):
        print(f"no estimate: {unestimated} of {len(groups)} groups have their cell timed at one group size only")
    by_mixer: dict[str, list[dict]] = defaultdict(list)
    for g in groups:
        by_mixer[g["mixer"]].append(g)

    def hours(gs: list[dict]) -> str:
        return " ".join(f"{sum(g[c + '_s'] for g in gs) / 3600:>{len(c) + 6}.2f}" for c in columns)

    print(f"{'mixer':>10} {'groups':>6} {'epochs':>7} {'run-epochs':>10} " + " ".join(f"GPU-h {c}" for c in columns))
    for mixer, gs in sorted(by_mixer.items(), key=lambda kv: -sum(g["upper_s"] for g in kv[1])):
        print(f"{mixer:>10} {len(gs):>6} {sum(g['epochs'] for g in gs):>7} {sum(g['run_epochs'] for g in gs):>10} "
              + hours(gs))
    print(f"{'all':>10} {len(groups):>6} {sum(g['epochs'] for g in groups):>7} "
          f"{sum(g['run_epochs'] for g in groups):>10} " + hours(groups))
    longest = max(groups, key=lambda g: g["upper_s"])
    print(f"longest group: {longest['cell']}, {longest['epochs']} epochs, "
          + ", ".join(f"{longest[c + '_s'] / 60:.1f} min {c}" for c in columns)
          + ": no number of GPUs finishes the grid sooner")
    for k in args.gpus:
        print(f"wall on {k} GPU(s), longest first: "
              + ", ".join(f"{makespan([g[c + '_s'] for g in groups], k) / 3600:.2f} h {c}" for c in columns))
    if args.epochs:
        print("\n".join(epoch_table(cost["epochs"], args.epochs)))
    if args.json:
        args.json.write_text(json.dumps(cost, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
