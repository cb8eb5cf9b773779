"""Training-step time of every mixer, side by side: ``python -m zoo.bench.step [--mixers a b ...]``.

One step is what training runs (``zoo.step.TrainStep``: forward, loss at the labelled positions, backward,
AdamW update) on one batch of MQAR (vocab 8192, 2 layers, kv = N/16), eagerly and replayed from a CUDA
graph, bf16 autocast on CUDA. Reports the median of ``iters`` steps after warm-up, timed with CUDA events.

Beside a group of G models (the G learning rates of a sweep cell, ``zoo.step``) it times one model at G times
the batch: the same examples' work in kernels G times as large, with one set of weights and one optimiser step,
which no way of training G models side by side (streams, stacked weights, vmap) can undercut by much. Its ratio
to one run is how cheap a group of G can get at that shape.

The graphs column and its ratio to softmax come from ``rounds`` rounds in turn: softmax's graphed step is kept while
the others are timed, and each round times ``iters`` steps of softmax, then as many of the mixer; the column is the
median of the mixer's rounds, the ratio the median of its rounds' ratios to softmax's in the same round. Two
processes' softmax steps differed by up to 7% on one H100 (1.23 to 1.32 ms): in rounds, a change of the GPU's speed
between timings reaches both sides of a ratio.

``TFLOP/s`` is one run's rate with CUDA graphs on the matmuls that have a weight operand (``zoo.bench.flops``,
counted on a CPU copy of the model): the projections and the head, not the sequence mixing.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from zoo.bench.flops import linear_costs
from zoo.data import LabelledSegment
from zoo.mixers.registry import list_mixers
from zoo.model import LanguageModel
from zoo.run import release_gpu_memory
from zoo.step import Member, TrainStep, build_optimizer

VOCAB = 8192


def bench_task(seq_len: int):
    """The bench's MQAR task at length ``seq_len``: vocab 8192, kv = N/16."""
    from zoo.tasks import get_task

    return get_task("mqar")(vocab_size=VOCAB, input_seq_len=seq_len, num_kv_pairs=max(1, seq_len // 16))


def bench_model(mixer: str, d_model: int, n_layers: int, seq_len: int) -> LanguageModel:
    """The bench's model of ``mixer`` on the CPU, from seed 0 (every member of a group starts the same)."""
    torch.manual_seed(0)
    return LanguageModel(VOCAB, d_model, n_layers=n_layers, mixer=mixer, max_seq_len=seq_len)


def make_step(mixer: str, batch: int, seq_len: int, d_model: int, device: torch.device, graphs: bool,
              group: int = 1, n_layers: int = 2, compile: bool = False):
    """A ready ``step()`` closure over one MQAR batch, for a group of ``group`` models of ``mixer``
    (each model's forward ``torch.compile``d when ``compile``)."""
    from zoo.config import make_run_config

    seg = LabelledSegment.from_dense("bench", *bench_task(seq_len).generate(batch, seed=0, device=device))
    train_cfg = make_run_config({}).train  # the default optimiser settings of a run
    cuda = device.type == "cuda"
    members = []
    for _ in range(group):
        model = bench_model(mixer, d_model, n_layers, seq_len).to(device)
        forward = torch.compile(model) if compile else model
        members.append(Member(model, forward, build_optimizer(model, train_cfg, cuda, graphs and cuda)))
    step = TrainStep(members, bf16=cuda, grad_clip=None, graphs=graphs and cuda)
    return (lambda: step(seg.inputs, seg.positions, seg.targets)), members[0].model


def step_flops(mixer: str, batch: int, seq_len: int, d_model: int, n_layers: int = 2) -> float:
    """Training FLOPs of one step of ``make_step``'s model and batch on the matmuls with a weight operand."""
    per_example, per_step = linear_costs(bench_model(mixer, d_model, n_layers, seq_len), bench_task(seq_len))
    return per_step["training"] + batch * per_example["training"]


def _median_ms(step, device: torch.device, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def rounds_ms(step, base, device: torch.device, warmup: int, iters: int, rounds: int) -> tuple[float, float]:
    """``step``'s median ms over ``rounds`` rounds, each timing ``base`` then ``step`` (``_median_ms``), and the median
    of its rounds' ratios to ``base``'s (``step`` itself the base: its rounds alone, ratio 1)."""
    times, ratios = [], []
    for _ in range(rounds):
        base_ms = None if base is step else _median_ms(base, device, warmup, iters)
        times.append(_median_ms(step, device, warmup, iters))
        ratios.append(1.0 if base_ms is None else times[-1] / base_ms)
    return statistics.median(times), statistics.median(ratios)


def step_times(mixers: list[str], batch: int = 256, seq_len: int = 256, d_model: int = 128,
               device: str | torch.device = "cuda", group: int = 4, warmup: int = 5, iters: int = 20,
               on_row=None, compile: bool = False, rounds: int = 5) -> list[dict]:
    """One row per mixer: ms per step eager, with CUDA graphs, for a group of ``group`` models (graphs) and for
    one model at ``group`` times the batch (``wide_ms``, graphs), the ratio to softmax (graphs, ``rounds`` rounds in
    turn with softmax's step once softmax is timed; before, NaN until it is), params, peak memory (beyond what was
    allocated before: softmax's kept step), error;
    with ``compile``, also ``compile_ms``: the compiled forward replayed from a CUDA graph."""
    device = torch.device(device)
    rows, base, paired = [], None, set()  # base: softmax's graphed step, once timed; paired: rows timed beside it
    for mixer in mixers:
        row = {"mixer": mixer, "error": None}
        try:
            resident = 0
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
                resident = torch.cuda.memory_allocated(device)
            step, model = make_step(mixer, batch, seq_len, d_model, device, graphs=False)
            row["eager_ms"] = _median_ms(step, device, warmup, iters)
            row["params"] = sum(p.numel() for p in model.parameters())
            row["step_flops"] = step_flops(mixer, batch, seq_len, d_model)

            def graphed_ms(batch_: int, group_: int = 1, compile_: bool = False) -> float:
                ms = _median_ms(make_step(mixer, batch_, seq_len, d_model, device, True, group_, compile=compile_)[0],
                                device, warmup, iters)
                release_gpu_memory()  # this step's graphs and their pools go before the next one is recorded
                return ms

            step = make_step(mixer, batch, seq_len, d_model, device, True)[0]
            if mixer == "softmax" and base is None:
                base = step
            row["graphs_ms"], ratio = rounds_ms(step, base or step, device, warmup, iters, rounds)
            if base is not None:
                row["ratio_to_softmax"] = ratio
                paired.add(len(rows))
            del step
            release_gpu_memory()
            row["group_ms"] = graphed_ms(batch, group)
            row["wide_ms"] = graphed_ms(group * batch)
            if compile:
                row["compile_ms"] = graphed_ms(batch, compile_=True)
            row["peak_gb"] = ((torch.cuda.max_memory_allocated(device) - resident) / 2**30 if device.type == "cuda"
                              else float("nan"))
        except Exception as e:  # noqa: BLE001 - one broken mixer must not hide the others' timings
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        for key in ("eager_ms", "graphs_ms", "group_ms", "wide_ms", "peak_gb", "step_flops") + (("compile_ms",) if compile else ()):
            row.setdefault(key, float("nan"))
        row.setdefault("params", 0)
        rows.append(row)
        release_gpu_memory()
        softmax_ms = next((r["graphs_ms"] for r in rows if r["mixer"] == "softmax"), float("nan"))
        for i, r in enumerate(rows):  # the rows not timed beside softmax's step: their medians' ratio
            if i not in paired:
                r["ratio_to_softmax"] = r["graphs_ms"] / softmax_ms
        if on_row is not None:
            on_row(row)
    return rows


def header(group: int = 4) -> str:
    """The column names of :func:`format_row`: group{G} is G models in one step, batchx{G} one model at G times
    the batch, each with its ratio to one run ("x one")."""
    return (f"{'mixer':<15} {'eager ms':>9} {'graphs ms':>9} {'x softmax':>9} {f'group{group} ms':>9} {'x one':>6} "
            f"{f'batchx{group} ms':>11} {'x one':>6} {'params':>10} {'peak GB':>8} {'TFLOP/s':>8}")


def format_row(r: dict) -> str:
    return (f"{r['mixer']:<15} {r['eager_ms']:>9.2f} {r['graphs_ms']:>9.2f} {r['ratio_to_softmax']:>9.2f} "
            f"{r['group_ms']:>9.2f} {r['group_ms'] / r['graphs_ms']:>6.2f} {r['wide_ms']:>11.2f} "
            f"{r['wide_ms'] / r['graphs_ms']:>6.2f} {r['params']:>10,} {r['peak_gb']:>8.2f} "
            f"{r['step_flops'] / r['graphs_ms'] / 1e9:>8.1f}"
            + (f" {r['compile_ms']:>12.2f}" if "compile_ms" in r else "")
            + (f"  ERROR {r['error']}" if r["error"] else ""))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", nargs="+", default=None, help="default: every registered mixer")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--group", type=int, default=4, help="models in the group column")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the graphs column, each beside softmax's")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", action="store_true", help="add a column: torch.compile'd forward + CUDA graph")
    args = parser.parse_args(argv)
    mixers = args.mixers or list_mixers()
    if "softmax" in list_mixers():  # the baseline goes first
        mixers = ["softmax", *(m for m in mixers if m != "softmax")]
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"{name}: B={args.batch} N={args.seq_len} d_model={args.d_model}, one training step (zoo.step.TrainStep), "
          f"bf16 autocast on CUDA, median of {args.iters} (graphs: of {args.rounds} rounds of {args.iters}, each "
          f"beside softmax's); group{args.group} = {args.group} models in one step, "
          f"batchx{args.group} = one model at {args.group} times the batch")
    print(header(args.group) + (f" {'compile+graph':>12}" if args.compile else ""), flush=True)
    step_times(mixers, args.batch, args.seq_len, args.d_model, args.device, args.group, iters=args.iters,
               on_row=lambda row: print(format_row(row), flush=True), compile=args.compile, rounds=args.rounds)


if __name__ == "__main__":
    main()
