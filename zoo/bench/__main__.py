"""``python -m zoo.bench``: zoo's speed on the local GPU, with its peers measured in the same process.

Sections (``--sections``, default all):
  steps    one training step (fwd+bwd) of every mixer, B=256, N=256, d_model=128 (zoo.bench.step)
  zoology  Zoology vs zoo on MQAR N=256, kv=16, d=128, batch 256, 100k/3k: data time, epoch time, accuracy
  epochs   seconds per epoch of every mixer at every N of the sweep (d_model=128), and width factors
  scaling  aggregate epochs/s of 1, 2, 4, 8 concurrent runs on one GPU
  grid     projected wall time of the whole sweep on one GPU (needs epochs and scaling)
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from zoo.bench.throughput import concurrent_epoch_rate, project_grid, time_run, timing_config
from zoo.sweep import load_sweep

SECTIONS = ("steps", "zoology", "epochs", "scaling", "grid")
TIMING_LR = 2.1544e-3


def _pick(sweep, mixer: str, n: int, d_model: int):
    for run in sweep.runs:
        c = run.cfg
        if (c.model.mixer, c.task.params.input_seq_len, c.model.d_model) == (mixer, n, d_model) \
                and abs(c.train.lr - TIMING_LR) < 1e-6:
            return c
    raise KeyError((mixer, n, d_model))


def _table(title: str, header: list[str], rows: list[list]) -> str:
    cells = [header] + [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title] + ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {SECTIONS}")
    parser.add_argument("--sweep", default="sweeps/mqar.yaml")
    parser.add_argument("--zoology", help="path to a Zoology checkout (the zoology section is skipped without it)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per timing run (the first is warm-up)")
    parser.add_argument("--runs", default="1,2,4,8", help="concurrent runs for the scaling section")
    parser.add_argument("--lengths", help="comma list of N to time (default: every N of the sweep)")
    parser.add_argument("--mixers", help="comma list of mixers to time (default: the sweep's)")
    parser.add_argument("--json", help="also write all numbers to this file")
    args = parser.parse_args(argv)
    sections = args.sections.split(",")
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        parser.error(f"--sections={bad[0]!r} is not valid: expected a comma list of {', '.join(SECTIONS)}")
    if not torch.cuda.is_available():
        print("note: no CUDA device; timings below are CPU timings")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(f"device: {device}, torch {torch.__version__}")
    sweep = load_sweep(args.sweep)
    mixers = args.mixers.split(",") if args.mixers else list(dict.fromkeys(r.cfg.model.mixer for r in sweep.runs))
    lengths = sorted({r.cfg.task.params.input_seq_len for r in sweep.runs})
    if args.lengths:
        lengths = [n for n in lengths if str(n) in args.lengths.split(",")]
    widths = sorted({r.cfg.model.d_model for r in sweep.runs})
    ref_n = 256 if 256 in lengths else lengths[0]  # the reference cell: Zoology's N=256, d=128
    ref_d = 128 if 128 in widths else widths[0]
    out: dict = {"device": device}
    t_start = time.time()

    if "steps" in sections:
        from zoo.bench.step import HEADER, format_row, step_times

        print(HEADER, flush=True)
        rows = step_times(mixers + [m for m in ("mamba2", "rwkv7") if m not in mixers],
                          on_row=lambda row: print(format_row(row), flush=True))
        out["steps"] = rows

    if "zoology" in sections and args.zoology:
        from zoo.bench.zoology_peer import zoology_attention_epoch

        base = _pick(sweep, "softmax", 256, 128)
        modes = {"zoo fp32": {"precision": "fp32"}, "zoo bf16": {"cuda_graphs": False},
                 "zoo bf16 graphs": {"cuda_graphs": True}, "zoo bf16 compile": {"compile": True}}
        ours = {name: time_run(timing_config(base, args.epochs, **train)) for name, train in modes.items()}
        peer = zoology_attention_epoch(args.zoology, lr=TIMING_LR, epochs=args.epochs)
        out["zoology"] = {"zoology fp32": peer, **ours}
        rows = [[name, r["data_s"], r["epoch_s"], peer["epoch_s"] / r["epoch_s"], peer["data_s"] / r["data_s"],
                 " ".join(map(str, r["accuracy"]))]
                for name, r in out["zoology"].items() if r["status"] == "completed"]
        print(_table("MQAR N=256 kv=16 d=128 batch 256, 100k/3k, attention (Zoology's figure-2 config)",
                     ["", "data s", "epoch s", "x epoch", "x data", "val acc per epoch"], rows), flush=True)

    epoch_s, width_factor = {}, {}
    if "epochs" in sections or "grid" in sections:
        rows = []
        for mixer in mixers:
            for n in lengths:
                r = time_run(timing_config(_pick(sweep, mixer, n, ref_d), args.epochs))
                epoch_s[(mixer, n)] = r.get("epoch_s", float("nan"))
                rows.append([mixer, n, r.get("data_s", float("nan")), epoch_s[(mixer, n)], r["status"]])
                print(f"  {mixer} N={n}: {r}", flush=True)
        for n in lengths:
            for d in widths:
                if d != ref_d:
                    r = time_run(timing_config(_pick(sweep, "softmax", n, d), args.epochs))
                    width_factor[(n, d)] = r.get("epoch_s", float("nan")) / epoch_s[("softmax", n)]
        out["epochs"] = {f"{m}/{n}": s for (m, n), s in epoch_s.items()}
        out["width_factor"] = {f"{n}/{d}": f for (n, d), f in width_factor.items()}
        print(_table(f"seconds per epoch, d_model={ref_d} (median of epochs 2..)", ["mixer", "N", "data s", "epoch s",
                                                                                 "status"], rows))
        print("width factors (softmax, epoch time relative to d=128): " +
              ", ".join(f"N={n} d={d}: {f:.2f}" for (n, d), f in width_factor.items()), flush=True)

    speedup = 1.0
    if "scaling" in sections or "grid" in sections:
        base = timing_config(_pick(sweep, "softmax", ref_n, ref_d), args.epochs)
        rows, single = [], None
        for k in map(int, args.runs.split(",")):
            r = concurrent_epoch_rate(base, k)
            single = single or r["epochs_per_s"]
            rows.append([k, r["completed"], r["epoch_s_each"], r["epochs_per_s"], r["epochs_per_s"] / single])
            speedup = max(speedup, r["epochs_per_s"] / single)
        out["scaling"] = rows
        print(_table(f"runs per GPU (softmax N={ref_n} d={ref_d}): aggregate throughput",
                     ["runs", "ok", "epoch s each", "epochs/s", "x one run"], rows), flush=True)

    if "grid" in sections:
        startup = 6.0  # seconds a worker process spends importing torch/lightning and building the run
        proj = project_grid(sweep.runs, epoch_s, width_factor, startup, speedup)
        out["grid"] = proj
        print(f"grid projection for {args.sweep}: {proj['runs']} runs x up to 64 epochs, no early stopping: "
              f"{proj['serial_hours']:.2f} h one run at a time, {proj['hours_one_gpu']:.2f} h on one GPU "
              f"at the best runs-per-GPU speedup {speedup:.2f}x")
    print(f"bench took {time.time() - t_start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
