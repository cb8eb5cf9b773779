"""The arithmetic of a finished sweep, and the floor it puts under the sweep's GPU time.

    python -m zoo.bench.flops results/mqar [timing folders ...] [--peak-tflops 989] [--bandwidth-tbs 4.8] [--cells]
        [--json rows.json]

Counted: every matmul that has a weight as an operand (the mixers' projections, Hyena's filter MLP, the tied head
at the labelled rows), as the model's forward runs it on the CPU (``weight_matmul_flops``); in training each such
product is paid again for the weight's gradient and again for the other operand's where that operand needs one (x3
for a projection of activations). Not counted: the sequence mixing (attention's scores and outputs, scans, long
and short convolutions, FFTs), norms, elementwise work, the loss, the optimizer. So the count is a floor: no
implementation of the same models does less tensor-core arithmetic. Its time is priced at the GPU's roofline: each
product at least its FLOPs at the peak rate (``--peak-tflops``, the dense bf16 rate: 989 TFLOP/s on an H100 or H200
SXM) and its operands and output, bf16, moved once at the memory bandwidth (``--bandwidth-tbs``, 4.8 TB/s on an
H200), whichever is longer; no sweep of these models trains on that GPU in less time than the floor.

A run costs its trained epochs times an epoch's count: every training example once (a batch's examples, plus the
work that does not grow with the batch, such as Hyena's filter, once per step) and the test pass's forward. The
per-example and per-step parts come from two forwards, of one and of two examples of the run's task.

With timing folders (as ``python -m zoo.bench.grid_cost`` takes them) each mixer's floor stands beside its priced
GPU time, and ``--cells`` gives each timed cell's rate: the training FLOPs of a later epoch (all its members)
over its measured seconds, and those seconds over the epoch's floor.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from zoo.bench.grid_cost import cell_name, grid_cost, size_tables
from zoo.config import import_user_modules, settings_config
from zoo.data import LabelledSegment
from zoo.results import final_records
from zoo.spec import build_model, run_spec

PEAK_TFLOPS = 989.0  # dense bf16 tensor-core rate of an H100 SXM and an H200 SXM (NVIDIA's data sheets)
BANDWIDTH_TBS = 4.8  # an H200's memory bandwidth (an H100 SXM's: 3.35)
BYTES = 2  # an operand's element, bf16 as the GPU trains

aten = torch.ops.aten
# op -> the indices of its two matrix operands
MATMULS = {aten.mm.default: (0, 1), aten.bmm.default: (0, 1), aten.addmm.default: (1, 2),
           aten.baddbmm.default: (1, 2)}


class _WeightMatmuls(TorchDispatchMode):
    """Sums the matmuls with an operand in ``weights``' storage (a weight, its transpose or a slice): their FLOPs
    and their floor seconds at ``peak`` FLOP/s and ``bandwidth`` bytes/s, each times the products its backward adds
    (see ``weight_matmul_flops``)."""

    def __init__(self, weights: list[torch.Tensor], peak: float, bandwidth: float):
        super().__init__()
        self.storages = {w.untyped_storage().data_ptr() for w in weights}
        self.peak, self.bandwidth = peak, bandwidth
        self.totals = {"forward": 0, "training": 0, "forward_s": 0.0, "training_s": 0.0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in MATMULS:
            a, b = (args[i] for i in MATMULS[func])
            if any(x.untyped_storage().data_ptr() in self.storages for x in (a, b)):
                flops = 2 * out.numel() * a.shape[-1]
                seconds = max(flops / self.peak, BYTES * (a.numel() + b.numel() + out.numel()) / self.bandwidth)
                products = 1 + a.requires_grad + b.requires_grad
                for key, value in (("forward", flops), ("forward_s", seconds)):
                    self.totals[key] += value
                    self.totals[key.replace("forward", "training")] += value * products
        return out


def weight_matmul_flops(model: torch.nn.Module, inputs: torch.Tensor, positions: torch.Tensor,
                        peak: float = PEAK_TFLOPS * 1e12, bandwidth: float = BANDWIDTH_TBS * 1e12) -> dict[str, float]:
    """The matmuls with a weight operand in ``model``'s forward at the labelled ``positions`` (B, K) of ``inputs``
    (B, L), logits included: ``forward`` and ``training`` FLOPs, and ``forward_s`` and ``training_s``, their
    seconds at the roofline (each product at least its FLOPs at ``peak`` and its operands and output, bf16, read or
    written once at ``bandwidth``). Training counts each product once more for each operand whose gradient the
    backward computes (a weight's always; an activation's where it requires grad), with the same bytes moved."""
    with _WeightMatmuls(list(model.parameters()), peak, bandwidth) as count:
        model.logits(model(inputs, positions))
    return count.totals


def linear_costs(model: torch.nn.Module, task, name: str = "flops", **rates) -> tuple[dict, dict]:
    """(per example, per step) parts of ``weight_matmul_flops`` for batches of ``task``'s examples: a step of b
    examples costs per step + b x per example (per step: the work independent of the batch, Hyena's filter say,
    and reading the weights). Read off two forwards, of one example and of two."""
    one, two = (weight_matmul_flops(model, *_labelled(task, n, name), **rates) for n in (1, 2))
    return {k: two[k] - one[k] for k in one}, {k: max(0, 2 * one[k] - two[k]) for k in one}


def _labelled(task, n: int, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, positions) of ``n`` examples of ``task``, compacted to their labelled positions as training sees them."""
    seg = LabelledSegment.from_dense(name, *task.generate(n, seed=0))
    return seg.inputs, seg.positions


def epoch_flops(run: dict, peak: float = PEAK_TFLOPS * 1e12, bandwidth: float = BANDWIDTH_TBS * 1e12) -> dict[str, float]:
    """One member's epoch of the resolved plain run config ``run``: ``train`` FLOPs (forward and backward of every
    training example) and ``test`` (the test pass's forward), and their roofline seconds ``train_s`` and ``test_s``
    (``weight_matmul_flops``)."""
    from zoo.tasks.split import plan_split

    spec = run_spec(run)
    torch.manual_seed(run["seed"])
    model = build_model(run["model"], spec.vocab_size, spec.max_seq_len).train()
    batch = {"train": run["train"]["batch_size"], "test": run["train"]["eval_batch_size"] or run["train"]["batch_size"]}
    totals = {}
    for split, kind in (("train", "training"), ("test", "forward")):
        for unit in ("", "_s"):
            totals[split + unit] = 0.0
        for task, num_examples, name in plan_split(run["task"]["name"], run["task"]["params"], run["task"][split], split):
            per_example, per_step = linear_costs(model, task, name, peak=peak, bandwidth=bandwidth)
            for unit in ("", "_s"):
                steps = -(-num_examples // batch[split])
                totals[split + unit] += num_examples * per_example[kind + unit] + steps * per_step[kind + unit]
    return totals


def sweep_flops(protocol: Path, peak: float = PEAK_TFLOPS * 1e12, bandwidth: float = BANDWIDTH_TBS * 1e12) -> list[dict]:
    """One row per finished run of the sweep folder ``protocol``: its mixer, cell name (``grid_cost``'s), trained
    epochs, an epoch's training FLOPs and roofline seconds, and the run's FLOPs and floor seconds (``epoch_flops``
    times its epochs, each epoch with its test pass). Runs that differ in lr alone share one count."""
    records = [r for r in final_records(protocol).values() if r.get("settings")]
    if not records:
        raise ValueError(f"no finished runs in {protocol}")
    cache: dict[str, dict] = {}
    rows = []
    for r in records:
        run = settings_config(r["settings"])
        import_user_modules(run)  # the mixers and tasks a sweep registered itself
        key = json.dumps({k: run[k] for k in ("task", "model", "seed")}
                         | {k: run["train"][k] for k in ("batch_size", "eval_batch_size")}, sort_keys=True)
        if key not in cache:
            cache[key] = epoch_flops(run, peak, bandwidth)
        epoch = cache[key]
        rows.append({"mixer": r["mixer"], "epochs": r["epochs"],
                     "cell": cell_name({k: json.dumps(v) for k, v in r["settings"].items()}, mixer=False),
                     "train_epoch_flops": epoch["train"], "train_epoch_s": epoch["train_s"],
                     "flops": r["epochs"] * (epoch["train"] + epoch["test"]),
                     "floor_s": r["epochs"] * (epoch["train_s"] + epoch["test_s"])})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.bench.flops", description=__doc__.splitlines()[0])
    parser.add_argument("protocol", type=Path, help="a finished sweep's folder (its runs' settings and epochs)")
    parser.add_argument("timings", type=Path, nargs="*", help="timing folders, as python -m zoo.bench.grid_cost takes")
    parser.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS,
                        help=f"the GPU's dense bf16 rate (default {PEAK_TFLOPS:g}: H100 or H200 SXM)")
    parser.add_argument("--bandwidth-tbs", type=float, default=BANDWIDTH_TBS,
                        help=f"the GPU's memory bandwidth, TB/s (default {BANDWIDTH_TBS:g}: H200)")
    parser.add_argument("--cells", action="store_true", help="with timings: each timed cell's rate, per group size")
    parser.add_argument("--json", type=Path, help="also write every run's row (sweep_flops) to this file")
    args = parser.parse_args(argv)
    for flag, value in (("--peak-tflops", args.peak_tflops), ("--bandwidth-tbs", args.bandwidth_tbs)):
        if not value > 0:
            print(f"flops: {flag}={value} is not valid: expected a number above 0", file=sys.stderr)
            return 2
    if args.cells and not args.timings:
        print("flops: --cells needs timing folders", file=sys.stderr)
        return 2
    peak = args.peak_tflops * 1e12
    try:
        rows = sweep_flops(args.protocol, peak, args.bandwidth_tbs * 1e12)
        cost = grid_cost(args.protocol, *args.timings) if args.timings else None
    except ValueError as e:
        print(f"flops: {e}", file=sys.stderr)
        return 2
    by_mixer: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_mixer[row["mixer"]].append(row)
    priced: dict[str, float] = defaultdict(float)
    column = None
    if cost:
        column = "estimate_s" if all(g["estimate_s"] is not None for g in cost["groups"]) else "upper_s"
        for g in cost["groups"]:
            priced[g["mixer"]] += g[column]
    print(f"{args.protocol}: {len(rows)} runs; matmuls with a weight operand only (see the module's docstring); "
          f"floor at {args.peak_tflops:g} TFLOP/s and {args.bandwidth_tbs:g} TB/s"
          + (f"; priced: grid_cost's {column[:-2]} from {', '.join(map(str, args.timings))}" if cost else ""))
    print(f"{'mixer':>10} {'runs':>5} {'run-epochs':>10} {'PFLOP':>8} {'at peak GPU-h':>13} {'floor GPU-h':>11}"
          + (f" {'priced GPU-h':>12} {'x floor':>8}" if cost else ""))

    def line(name: str, rs: list[dict], seconds: float | None) -> str:
        flops, floor = sum(r["flops"] for r in rs), sum(r["floor_s"] for r in rs)
        text = (f"{name:>10} {len(rs):>5} {sum(r['epochs'] for r in rs):>10} {flops / 1e15:>8.1f} "
                f"{flops / peak / 3600:>13.3f} {floor / 3600:>11.3f}")
        return text + (f" {seconds / 3600:>12.2f} {seconds / floor:>8.1f}" if seconds is not None else "")

    for mixer, rs in sorted(by_mixer.items(), key=lambda kv: -sum(r["floor_s"] for r in kv[1])):
        print(line(mixer, rs, priced[mixer] if cost else None))
    print(line("all", rows, sum(priced.values()) if cost else None))
    if args.cells:
        per_cell = {(r["cell"], r["mixer"]): r for r in rows}

        def entry(cell: str, mixer: str, members: int, at: dict) -> str | None:
            r, seconds = per_cell.get((cell, mixer)), at.get((cell, mixer))
            if r is None or seconds is None:
                return None
            return (f"{members * r['train_epoch_flops'] / seconds / 1e12:.0f} "
                    f"({seconds / (members * r['train_epoch_s']):.1f}x)")

        print("a later epoch's training: TFLOP/s of the weight matmuls, and the epoch's seconds over its floor's")
        print("\n".join(size_tables(cost["epochs"], sorted(by_mixer), "{members} member(s) at once:", entry, 14)))
    if args.json:
        args.json.write_text(json.dumps({"peak_tflops": args.peak_tflops, "bandwidth_tbs": args.bandwidth_tbs,
                                         "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
