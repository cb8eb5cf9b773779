"""``python -m zoo.bench``: zoo's speed on the local GPU, with its peers measured in the same process.

Sections (``--sections``, default all):
  steps    one training step (zoo.step.TrainStep) of every mixer, eager / CUDA graphs / a group of 4 / one model at
           4x the batch (how cheap a group of 4 can get), B=256 N=256 d=128
  zoology  Zoology vs zoo on MQAR N=256, kv=16, d=128, batch 256, 100k/3k: data time, epoch time, accuracy
           (needs --zoology; Zoology runs last, after every zoo measurement); zoo trains Zoology's model
           (zoology_peer.ZOOLOGY_MODEL: its block and its embedding dropout, whatever the sweep's base says)
  epochs   seconds per epoch of every mixer at every N of the sweep (d_model=128), one run and a group of
           the sweep's learning rates, and width factors
  scaling  aggregate epochs/s of 1, 2, 4, 8 concurrent runs on one GPU
  gpus     wall time of one slice of the sweep (the bench's mixers and lengths at d_model=128, or at --widths, the
           lrs as groups) through python -m zoo.sweep on the first 1, 2, 4, 8 GPUs (--gpus), and the speedup over
           one GPU (skipped on a machine with one GPU), after one untimed epoch of the slice that fills the kernel
           caches
  grid     projected wall time of the sweep on one GPU, in groups (needs epochs and scaling): of its cells timed,
           the whole sweep by default; a slice (--mixers, --lengths, --widths) is projected as that slice, and said so
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from zoo.bench import positive_counts
from zoo.bench.throughput import (TIMING_LR, cell_config, concurrent_epoch_rate, project_grid, time_group, time_run,
                                  timing_config)

SECTIONS = ("steps", "zoology", "epochs", "scaling", "gpus", "grid")


def _table(title: str, header: list[str], rows: list[list]) -> str:
    cells = [header] + [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title] + ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def _status(record: dict) -> str:
    """A timed run's status, and for one that did not complete the last line of its error: why its row is empty."""
    status = record["status"]
    lines = [line.strip() for line in (record.get("error") or "").splitlines() if line.strip()]
    return status if status == "completed" or not lines else f"{status}: {lines[-1][:120]}"


def _chosen(parser: argparse.ArgumentParser, flag: str, asked: list[int] | None, values) -> list[int]:
    """The sweep's ``values`` that ``asked`` picks (all of them when None), sorted; a value the sweep lacks is an
    error naming the flag, the value and the allowed ones (exit 2)."""
    allowed = sorted(int(v) for v in values)
    for value in asked or []:
        if value not in allowed:
            parser.error(f"{flag}={value} is not valid: expected values of the sweep's grid, "
                         f"{','.join(map(str, allowed))}")
    return [v for v in allowed if not asked or v in asked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {SECTIONS}")
    parser.add_argument("--sweep", default="sweeps/mqar.yaml", help="the sweep whose cells are timed")
    parser.add_argument("--zoology", help="path to a Zoology checkout (the zoology section is skipped without it)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per timing run (the first is warm-up)")
    parser.add_argument("--runs", type=positive_counts, default="1,2,4,8", help="concurrent runs for the scaling section")
    parser.add_argument("--gpus", type=positive_counts, default="1,2,4,8",
                        help="GPU counts of the gpus section, beside 1 (those above this machine's count are left out)")
    parser.add_argument("--lengths", type=positive_counts,
                        help="comma list of N to time (default: every N of the sweep)")
    parser.add_argument("--widths", type=positive_counts,
                        help="comma list of d_model: the epochs section's width factors (default: every d_model of the "
                             "sweep) and the gpus section's slice (default: d_model=128 alone)")
    parser.add_argument("--mixers", help="comma list of mixers to time (default: the sweep's)")
    parser.add_argument("--step-shape", default="256,256,128", help="B,N,d_model of the steps section")
    parser.add_argument("--json", help="also write all numbers to this file")
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        parser.error(f"--sections={bad[0]!r} is not valid: expected a comma list of {', '.join(SECTIONS)}")
    spec = OmegaConf.load(args.sweep)
    grid = spec.grid
    mixers = args.mixers.split(",") if args.mixers else list(grid["model.mixer"])
    shapes = {s["task.params.input_seq_len"]: dict(s) for s in grid["shape"]}
    lengths = _chosen(parser, "--lengths", args.lengths, shapes)
    widths = _chosen(parser, "--widths", args.widths, grid["model.d_model"])
    lrs = list(grid["train.lr"])
    ref_n = 256 if 256 in lengths else lengths[0]  # the reference cell: Zoology's N=256, d=128
    ref_d = 128 if 128 in widths else widths[0]
    lr = TIMING_LR if TIMING_LR in lrs else lrs[0]
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else "cpu"
    print(f"device: {device}, torch {torch.__version__}" + ("" if cuda else " (no CUDA device: CPU timings)"))

    def config(mixer, n, d, model=None, **train):
        settings = {**shapes[n], **(model or {})}
        return timing_config(cell_config(mixer, settings, d, lr, args.sweep), args.epochs, **train)

    out: dict = {"device": device}
    t_start = time.time()

    if "steps" in sections:
        from zoo.bench.step import format_row, header, step_times

        batch, n, d = map(int, args.step_shape.split(","))
        iters, rounds = (20, 5) if cuda else (2, 1)
        print(f"one training step, B={batch} N={n} d_model={d}, bf16 on CUDA, median of {iters} (graphs: of {rounds} "
              f"rounds of {iters}, each beside softmax's)", flush=True)
        print(header(), flush=True)
        extra = [] if args.mixers else [m for m in ("mamba2", "rwkv7") if m not in mixers]  # beyond the paper grid
        rows = step_times(mixers + extra, batch, n, d,
                          "cuda" if cuda else "cpu", iters=iters, warmup=5 if cuda else 1,
                          on_row=lambda row: print(format_row(row), flush=True), rounds=rounds)
        out["steps"] = rows

    if "zoology" in sections and args.zoology:
        from zoo.bench.zoology_peer import ZOOLOGY_MODEL, zoology_attention_epoch

        modes = {"zoo fp32": {"precision": "fp32", "cuda_graphs": False}, "zoo bf16 eager": {"cuda_graphs": False},
                 "zoo bf16 graphs": {"cuda_graphs": True}}
        if cuda:  # on a CPU, compiling would time the C++ compiler
            modes["zoo bf16 compile+graphs"] = {"compile": True}
        # zoo trains the peer's model, whatever the sweep file's base sets: Zoology's block and embedding dropout
        results = {name: time_run(config("softmax", ref_n, ref_d, ZOOLOGY_MODEL, **train))
                   for name, train in modes.items()}
        base = config("softmax", ref_n, ref_d)
        results["zoology fp32"] = zoology_attention_epoch(
            args.zoology, seq_len=ref_n, kv=base.task.params.num_kv_pairs, d_model=ref_d,
            batch=base.train.batch_size, num_train=base.task.train[0].num_examples,
            num_test=base.task.test[0].num_examples, lr=lr, epochs=args.epochs)
        out["zoology"] = results
        peer = results["zoology fp32"]
        rows = [[name, r["data_s"], r["epoch_s"], peer["epoch_s"] / r["epoch_s"], peer["data_s"] / r["data_s"],
                 " ".join(map(str, r["accuracy"]))]
                for name, r in results.items() if r.get("status") == "completed"]
        rows += [[name, "-", "-", "-", "-", _status(r)] for name, r in results.items()
                 if r.get("status") != "completed"]
        print(_table(f"MQAR N={ref_n} kv={base.task.params.num_kv_pairs} d={ref_d} batch {base.train.batch_size}, "
                     "attention, one process (x = Zoology's time / this row's)",
                     ["", "data s", "epoch s", "x epoch", "x data", "test acc per epoch"], rows), flush=True)

    epoch_s, group_s, width_factor = {}, {}, {}
    if "epochs" in sections or "grid" in sections:
        rows = []
        for mixer in mixers:
            for n in lengths:
                one = time_run(config(mixer, n, ref_d))
                group = time_group([config(mixer, n, ref_d, lr=x) for x in lrs])
                epoch_s[(mixer, n)] = one.get("epoch_s", float("nan"))
                group_s[(mixer, n)] = group.get("epoch_s", float("nan"))
                rows.append([mixer, n, one.get("data_s", float("nan")), epoch_s[(mixer, n)], group_s[(mixer, n)],
                             group_s[(mixer, n)] / epoch_s[(mixer, n)], _status(one)])
                print("  " + "  ".join(map(str, rows[-1])), flush=True)
        for n in lengths:
            for d in widths:
                if d != ref_d:
                    r = time_group([config("softmax", n, d, lr=x) for x in lrs])
                    width_factor[(n, d)] = r.get("epoch_s", float("nan")) / group_s[("softmax", n)]
        out["epochs"] = {f"{m}/{n}": [epoch_s[(m, n)], group_s[(m, n)]] for (m, n) in epoch_s}
        out["width_factor"] = {f"{n}/{d}": f for (n, d), f in width_factor.items()}
        print(_table(f"seconds per epoch, d_model={ref_d} (median of epochs 2..); group = the sweep's {len(lrs)} lrs "
                     "in one process", ["mixer", "N", "data s", "epoch s", f"group{len(lrs)} s", "x one", "status"],
                     rows))
        print("width factors (softmax group, epoch time relative to d=%d): " % ref_d +
              ", ".join(f"N={n} d={d}: {f:.2f}" for (n, d), f in width_factor.items()), flush=True)

    speedup = 1.0
    if "scaling" in sections or "grid" in sections:
        base = config("softmax", ref_n, ref_d)
        rows, single = [], None
        for k in args.runs:
            r = concurrent_epoch_rate(base, k)
            single = single or r["epochs_per_s"]
            rows.append([k, r["completed"], r["epoch_s_each"], r["epochs_per_s"], r["epochs_per_s"] / single])
            speedup = max(speedup, r["epochs_per_s"] / single)
        out["scaling"] = rows
        print(_table(f"runs per GPU (softmax N={ref_n} d={ref_d}): aggregate throughput",
                     ["runs", "ok", "epoch s each", "epochs/s", "x one run"], rows), flush=True)

    if "gpus" in sections:
        from zoo.bench.gpu_scaling import device_counts, sweep_wall_seconds, warm_caches

        slice_widths = widths if args.widths else [ref_d]
        only = ([f"model.mixer={m}" for m in mixers] + [f"task.params.input_seq_len={n}" for n in lengths]
                + [f"model.d_model={d}" for d in slice_widths])
        # CPU workers stand in for GPUs at any count: on a machine without CUDA the section checks that it runs
        available = torch.cuda.device_count() if cuda else max(args.gpus)
        counts = device_counts(args.gpus, available)
        if len(counts) < 2:
            print(f"gpus section skipped: it compares 1 GPU with more (--gpus {','.join(map(str, args.gpus))}), and "
                  f"this machine has {available}", flush=True)
        else:
            if set(args.gpus) - set(counts):
                print(f"gpus section: {sorted(set(args.gpus) - set(counts))} left out, this machine has {available}")
            if cuda:  # on a CPU, Triton's interpreter compiles nothing: no cache to fill
                warm = warm_caches(args.sweep, only, max(counts), cuda)
                print(f"gpus section: warm-up (one epoch of the slice on {max(counts)} GPUs, untimed, fills the "
                      f"kernel caches): {warm['wall_s']:.0f} s, exit {warm['exit']}", flush=True)
            rows, one = [], None
            for k in counts:
                r = sweep_wall_seconds(args.sweep, only, args.epochs, k, cuda)
                one = one or r["wall_s"]
                rows.append([k, r["completed"], r["wall_s"], one / r["wall_s"], r["groups_s"], r["outside_s"],
                             r["exit"]])
                print(f"  {k} device(s): {r['completed']} runs in {r['wall_s']:.1f} s", flush=True)
                if r["exit"]:
                    print(f"zoo.sweep on {k} device(s) exited {r['exit']}:\n{r['error']}", flush=True)
            out["gpus"] = rows
            unit = "GPUs" if cuda else "CPU workers (no CUDA device: not a GPU measurement)"
            print(_table(f"sweep wall time over {unit}: {len(mixers)} mixers x N in {lengths} x d_model in "
                         f"{slice_widths}, "
                         f"the {len(lrs)} lrs as groups, {args.epochs} epochs, early stop off, python -m zoo.sweep",
                         ["devices", "runs done", "wall s", "x one", "groups s", "outside s", "exit"], rows),
                  flush=True)
            print("(groups s: the groups' own seconds added up; outside s: the sweep's seconds before its first group "
                  "and after its last, the same on any count)", flush=True)

    if "grid" in sections:
        proj = project_grid(spec, group_s, width_factor, startup_s=3.0, speedup=speedup, ref_d=ref_d)
        out["grid"] = proj
        missing = "; ".join(f"{key} {values}" for key, values in proj["left_out"].items() if values)
        print(f"grid projection for {args.sweep}: {proj['groups']} groups of {len(lrs)} lrs x up to "
              f"{proj['epochs']} epochs, no early stopping: {proj['serial_hours']:.2f} h one group at a time, "
              f"{proj['hours_one_gpu']:.2f} h on one GPU at the best processes-per-GPU speedup {speedup:.2f}x"
              + (f" (the slice timed: left out {missing})" if missing else ""))
    print(f"bench took {time.time() - t_start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
