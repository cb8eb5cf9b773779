"""Does each mixer learn MQAR? ``python -m zoo.bench.mqar_check [--mixers ...]``.

A plain training loop (no Lightning) on fresh GPU-generated MQAR batches every step (N=128, 8 key-value
pairs, vocab 8192, d_model 128, 2 layers), AdamW with linear warm-up, bf16 autocast; stops after
``--steps`` steps or ``--seconds`` per mixer, then reports accuracy on held-out examples.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from tasks import get_task
from zoo.model import LanguageModel
from zoo.registry import list_mixers


def accuracy(model: LanguageModel, x: torch.Tensor, y: torch.Tensor, batch: int = 500) -> float:
    hits = total = 0
    with torch.no_grad(), torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=x.is_cuda):
        for i in range(0, len(x), batch):
            xb, yb = x[i:i + batch], y[i:i + batch]
            mask = yb != -100
            pred = model.logits(model(xb)[mask]).argmax(-1)
            hits += int((pred == yb[mask]).sum())
            total += int(mask.sum())
    return hits / total


def train_mixer(mixer: str, task, device: torch.device, steps: int, seconds: float, batch: int, lr: float,
                d_model: int) -> dict:
    torch.manual_seed(0)
    model = LanguageModel(task.vocab_size, d_model, n_layers=2, mixer=mixer, max_seq_len=task.seq_len).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
    x_test, y_test = task.generate(2000, seed=10**6, device=device)
    start, step = time.perf_counter(), 0
    while step < steps and time.perf_counter() - start < seconds:
        x, y = task.generate(batch, seed=step, device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            mask = y != -100
            loss = F.cross_entropy(model.logits(model(x)[mask]).float(), y[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
    return {"mixer": mixer, "steps": step, "seconds": time.perf_counter() - start, "loss": float(loss.detach()),
            "accuracy": accuracy(model, x_test, y_test)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", nargs="+", default=None, help="default: every registered mixer")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=30.0, help="time limit per mixer")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    task = get_task("mqar")(vocab_size=8192, input_seq_len=128, num_kv_pairs=8)
    for mixer in args.mixers or list_mixers():
        try:
            r = train_mixer(mixer, task, torch.device(args.device), args.steps, args.seconds, args.batch, args.lr,
                            args.d_model)
            print(f"{r['mixer']:<10} steps {r['steps']:>5} in {r['seconds']:5.1f}s  loss {r['loss']:.3f}  "
                  f"MQAR accuracy {r['accuracy']:.3f}", flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on to the next mixer
            print(f"{mixer:<10} ERROR {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
