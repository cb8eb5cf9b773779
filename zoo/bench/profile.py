"""How busy is the GPU during training? ``python -m zoo.bench.profile [--mixers softmax gatedfwa] [--graphs on|off|both]``.

Trains one epoch of the figure-2 MQAR cell (N=256, kv=16, d_model=128, batch 256, 100k examples), or of any
cell of the grid (``--cell N,d_model``: the sweep's kv pairs and batch at that N, its mixer_kwargs), one run
or a group of the sweep's learning rates (``--group 4``), with the real training path (``zoo.run.train_group``)
under ``torch.profiler``, after a warm-up run of the same config (Triton compilation, cuBLAS heuristics, graph
capture, torch.compile's code, which the profiled run keeps). ``--examples`` shortens the epoch; the grid's large
cells need a few thousand steps' worth of seconds otherwise. Reports the wall time of the profiled run, the time
the GPU spent running kernels (the union of their intervals, so overlapping kernels count once), their ratio (the
GPU-busy fraction), kernels per training step and the top kernels.
"""
from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import torch

from omegaconf import OmegaConf

from zoo.bench.throughput import TIMING_LR, cell_config, timing_config
from zoo.bench.zoology_peer import ZOOLOGY_MODEL


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``[start, end)`` intervals (microseconds in, seconds out)."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1e6


# kind of work -> a pattern of the kernel names that do it (first match wins; the names are cuBLAS/CUTLASS's,
# PyTorch's, FlashAttention's and the Triton kernels' own)
KINDS = {
    "loss": r"cross_entropy|loss_and_grad|log_softmax|nll_loss",
    # and the dense form's softmax rows (PyTorch's softmax kernels, not their log-softmax instances)
    "attention": r"flash|fmha|attn|attention|softmax_warp_\w+<(\w+, ){3}\d+, false|(?<!log)softmax(forward|backward)epi",
    "scan / recurrence": r"scan|recurren|wkv|rwkv|ssd|chunk|long_conv|short_conv|conv|fft|delta_rule",
    "optimizer": r"adam|multi_tensor",  # before norm: gradient clipping's norms run as multi_tensor kernels
    "norm": r"norm",
    "embedding": r"embedding|sorted_sum|radix|sort|index_put|scatter|gather",
    "matmul": r"gemm|gemv|cutlass|xmma|nvjet|cublas|magma|sm\d+_|_project_kernel",
    "elementwise / reduction": r"elementwise|vectorized|unrolled|reduce|column_sum|sum_rows|sum_blocks|copy|fill|cat|"
                               r"where|token_shift|implicit_filter|triton_",
}


def kind_of(kernel: str) -> str:
    """The kind of work a GPU kernel does, by its name (``KINDS``), or "other"."""
    name = kernel.lower()
    return next((kind for kind, pattern in KINDS.items() if re.search(pattern, name)), "other")


def short_name(kernel: str, width: int = 170) -> str:
    """A kernel's name without PyTorch's namespace noise, cut to ``width``: what the functor of an
    elementwise or reduction kernel is shows within the width."""
    return re.sub(r"void |at::native::|\(anonymous namespace\)::|std::", "", kernel)[:width]


def cell_configs(mixer: str, cell: tuple[int, int] | None = None, group: int = 1, examples: int | None = None,
                 sweep: str | Path = "sweeps/mqar.yaml", model: dict | None = None) -> list:
    """The run configs one profile trains: the sweep's cell at ``cell = (N, d_model)`` (None: figure 2's, N=256,
    d_model=128); one run at the timing lr, or the sweep's first ``group`` learning rates; ``examples`` training
    examples if given; ``model``, dotted settings over the sweep's (``zoology_peer.ZOOLOGY_MODEL``: the model the
    zoology bench section trains). ValueError, naming the sweep's lengths, for an N it does not have."""
    spec = OmegaConf.load(sweep)
    n, d = cell or (256, 128)
    lengths = [s["task.params.input_seq_len"] for s in spec.grid["shape"]]
    if n not in lengths:
        raise ValueError(f"--cell: N={n} is not valid: expected one of the lengths of {sweep}: {lengths}")
    shape = dict(spec.grid["shape"][lengths.index(n)])
    if examples is not None:
        shape["task.train"] = [{"num_examples": examples}]
    shape.update(model or {})
    lrs = list(spec.grid["train.lr"])[:group] if group > 1 else [TIMING_LR]
    return [cell_config(mixer, shape, d, lr, sweep=sweep) for lr in lrs]


def top_ops(averages, n: int, steps: int) -> list[tuple[str, float, float, str]]:
    """The ``n`` aten ops with the most GPU time of their own in ``averages`` (the profiler's ``key_averages
    (group_by_input_shape=True)``): (name, seconds, calls a step, input shapes). What launched a kernel, where the
    kernels' names do not say (PyTorch's copies and elementwise kernels)."""
    ops = [a for a in averages if a.key.startswith("aten::") and a.self_device_time_total > 0]
    ops.sort(key=lambda a: -a.self_device_time_total)
    return [(a.key, a.self_device_time_total / 1e6, a.count / steps, str(a.input_shapes)) for a in ops[:n]]


def profile_run(mixer: str, graphs: bool, epochs: int = 1, top: int = 8, cell: tuple[int, int] | None = None,
                group: int = 1, examples: int | None = None, ops: int = 0, model: dict | None = None) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from zoo.run import keeping_compiled_code, train_group

    cfgs = [timing_config(c, epochs, cuda_graphs=graphs) for c in cell_configs(mixer, cell, group, examples,
                                                                                    model=model)]
    cfg = cfgs[0]
    with tempfile.TemporaryDirectory() as tmp:
        train_group(cfgs, [Path(tmp) / f"warm{i}" for i in range(len(cfgs))], quiet=True)
        torch.cuda.synchronize()
        # the warm-up's compiled code stays (RWKV-7's compiled functions would compile again)
        with keeping_compiled_code(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                              record_shapes=ops > 0) as prof:
            t0 = time.perf_counter()
            record = train_group(cfgs, [Path(tmp) / f"run{i}" for i in range(len(cfgs))], quiet=True)[0]
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = busy_seconds([(e.time_range.start, e.time_range.end) for e in kernels])
    by_name: dict[str, float] = {}
    for e in kernels:
        by_name[e.name] = by_name.get(e.name, 0.0) + e.time_range.elapsed_us() / 1e6
    steps = -(-cfg.task.train[0].num_examples // cfg.train.batch_size) * epochs
    calls: dict[str, int] = {}
    for e in kernels:
        calls[e.name] = calls.get(e.name, 0) + 1
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1])[:top]
    by_kind: dict[str, float] = {}
    for name, s in by_name.items():
        kind = kind_of(name)
        by_kind[kind] = by_kind.get(kind, 0.0) + s
    return {"mixer": mixer, "graphs": graphs, "status": record["status"], "error": record.get("error"),
            "wall_s": wall,
            "epoch_s": record["history"][-1]["train_seconds"] if record["history"] else float("nan"),
            "gpu_busy_s": busy, "busy_fraction": busy / wall, "kernels_per_step": len(kernels) / steps,
            "top": [(short_name(name), round(s, 4), calls[name] / steps) for name, s in ranked],
            "kinds": sorted(by_kind.items(), key=lambda kv: -kv[1]),
            "ops": top_ops(prof.key_averages(group_by_input_shape=True), ops, steps) if ops else []}


def cell_arg(text: str) -> tuple[int, int]:
    """argparse type of ``--cell``: ``N,d_model``, two positive integers."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not N,d_model (two positive integers, e.g. 512,512)")
    return int(parts[0]), int(parts[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.bench.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", nargs="+", default=["softmax"])
    parser.add_argument("--graphs", choices=("on", "off", "both"), default="both")
    parser.add_argument("--top", type=int, default=8, help="how many kernels to list, by total time")
    parser.add_argument("--cell", type=cell_arg, help="N,d_model: a cell of sweeps/mqar.yaml (default: figure 2's)")
    parser.add_argument("--group", type=int, choices=(1, 2, 3, 4), default=1,
                        help="train the sweep's first K learning rates as one group")
    parser.add_argument("--examples", type=int, help="training examples an epoch (default: the sweep's 100000)")
    parser.add_argument("--ops", type=int, default=0,
                        help="also list this many aten ops by their own GPU time, with their input shapes (with "
                             "--graphs off: a replayed CUDA graph runs no ops the profiler sees)")
    parser.add_argument("--zoology-model", action="store_true",
                        help="train the zoology section's model (Zoology's normed block, embedding dropout 0.1) "
                             "in place of the sweep's")
    args = parser.parse_args(argv)
    model = ZOOLOGY_MODEL if args.zoology_model else None
    try:
        cfg = cell_configs(args.mixers[0], args.cell, args.group, args.examples, model=model)[0]
    except ValueError as err:
        parser.error(str(err))
    if not torch.cuda.is_available():
        print("error: --device cuda is required: the profile reads GPU kernel times")
        return 2
    t = cfg.task
    steps = -(-t.train[0].num_examples // cfg.train.batch_size)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; one epoch of MQAR "
          f"N={t.params.input_seq_len} kv={t.params.num_kv_pairs} d={cfg.model.d_model} batch {cfg.train.batch_size} "
          f"({steps} steps + validation), {args.group} lr(s) as one group, after a warm-up run")
    modes = {"on": [True], "off": [False], "both": [False, True]}[args.graphs]
    for mixer in args.mixers:
        for graphs in modes:
            r = profile_run(mixer, graphs, top=args.top, cell=args.cell, group=args.group, examples=args.examples,
                            ops=args.ops, model=model)
            print(f"{mixer:<9} graphs={'on ' if graphs else 'off'} wall {r['wall_s']:.3f} s "
                  f"(epoch {r['epoch_s']:.3f} s)"
                  f"  GPU busy {r['gpu_busy_s']:.3f} s = {100 * r['busy_fraction']:.0f}%"
                  f"  kernels/step {r['kernels_per_step']:.0f}  [{r['status']}]", flush=True)
            if r["status"] != "completed":  # a profile of a run that stopped early is not the epoch it claims
                print(f"    the run stopped: {r['error']}")
            print("    by kind: " + ", ".join(f"{kind} {s:.3f} s" for kind, s in r["kinds"]))
            for name, s, per_step in r["top"]:
                print(f"    {s:8.4f} s  {per_step:5.1f}/step  {name}")
            for name, s, per_step, shapes in r["ops"]:
                print(f"    op {s:8.4f} s  {per_step:5.1f}/step  {name} {shapes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
