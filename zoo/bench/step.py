"""Training-step time of every mixer, side by side: ``python -m zoo.bench.step [--mixers a b ...]``.

One step = forward + backward of a ``LanguageModel`` (vocab 8192, 2 layers) on random token ids, loss =
cross entropy at a random 1/16 of the positions (MQAR-like: few labelled positions), under bf16
autocast on CUDA. Reports the median of ``iters`` steps after ``warmup`` steps, timed with CUDA events.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from zoo.model import LanguageModel
from zoo.registry import list_mixers

VOCAB = 8192


def _time_mixer(mixer: str, batch: int, seq_len: int, d_model: int, device: torch.device, n_layers: int,
                warmup: int, iters: int) -> dict:
    torch.manual_seed(0)
    model = LanguageModel(VOCAB, d_model, n_layers=n_layers, mixer=mixer, max_seq_len=seq_len).to(device)
    ids = torch.randint(0, VOCAB, (batch, seq_len), device=device)
    labelled = torch.rand(batch, seq_len, device=device) < 1 / 16
    targets = torch.randint(0, VOCAB, (int(labelled.sum()),), device=device)
    cuda = device.type == "cuda"

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            hidden = model(ids)
            loss = F.cross_entropy(model.logits(hidden[labelled]).float(), targets)
        loss.backward()
        model.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            times.append(1e3 * (time.perf_counter() - t0))
    return {"mixer": mixer, "ms_per_step": statistics.median(times),
            "params": sum(p.numel() for p in model.parameters()),
            "peak_mem_gb": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else float("nan")}


def step_times(mixers: list[str], batch: int = 256, seq_len: int = 256, d_model: int = 128,
               device: str | torch.device = "cuda", n_layers: int = 2, warmup: int = 5, iters: int = 20,
               on_row=None) -> list[dict]:
    """One row per mixer: mixer, ms_per_step, ratio_to_softmax (NaN without softmax), params, peak_mem_gb,
    error (None, or the exception text of a mixer that failed to build or run). ``on_row(row)`` is called
    as each mixer finishes (its ratio is set when softmax was timed before it)."""
    device = torch.device(device)
    rows = []
    for mixer in mixers:
        try:
            row = _time_mixer(mixer, batch, seq_len, d_model, device, n_layers, warmup, iters)
            row["error"] = None
        except Exception as e:  # noqa: BLE001 - one broken mixer must not hide the others' timings
            row = {"mixer": mixer, "ms_per_step": float("nan"), "params": 0, "peak_mem_gb": float("nan"),
                   "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        base = next((r["ms_per_step"] for r in rows if r["mixer"] == "softmax"), float("nan"))
        for r in rows:
            r["ratio_to_softmax"] = r["ms_per_step"] / base
        if on_row is not None:
            on_row(row)
    return rows


HEADER = f"{'mixer':<10} {'ms/step':>9} {'x softmax':>9} {'params':>10} {'peak GB':>8}"


def format_row(r: dict) -> str:
    return (f"{r['mixer']:<10} {r['ms_per_step']:>9.2f} {r['ratio_to_softmax']:>9.2f} {r['params']:>10,} "
            f"{r['peak_mem_gb']:>8.2f}" + (f"  ERROR {r['error']}" if r["error"] else ""))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", nargs="+", default=None, help="default: every registered mixer")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    mixers = args.mixers or list_mixers()
    if "softmax" in list_mixers():  # the baseline goes first
        mixers = ["softmax", *(m for m in mixers if m != "softmax")]
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"{name}: B={args.batch} N={args.seq_len} d_model={args.d_model} layers={args.n_layers}, "
          f"forward+backward, bf16 autocast on CUDA, median of {args.iters}")
    print(HEADER, flush=True)
    step_times(mixers, args.batch, args.seq_len, args.d_model, args.device, args.n_layers, iters=args.iters,
               on_row=lambda row: print(format_row(row), flush=True))


if __name__ == "__main__":
    main()
