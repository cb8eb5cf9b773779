"""Run a sweep's unfinished runs on a backend (``zoo.backends``: local worker processes, or Ray tasks on a
cluster) and gather their results into results.jsonl, in this one process.

The scheduler holds the sweep folder's lock, skips finished runs (``zoo.results.pending``), gathers the runs
of one cell that differ only in lr into groups trained side by side (``zoo.run.train_group``), queues the
groups longest first, and writes every result the backend hands back (``zoo.results.write_result``).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from omegaconf import OmegaConf

from zoo.backends import Options, get_backend
from zoo.results import SweepLock, pending, write_result


@dataclass
class Summary:
    counts: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.counts["failed"]

    def add(self, record: dict, label: str) -> None:
        self.counts[record["status"]] += 1
        if record["status"] != "completed":
            first_line = (record.get("error") or "").strip().splitlines()[-1:] or [""]
            self.problems.append(f"  {record['status']}: {record['id']} ({label}): {first_line[0]}")

    def describe(self) -> str:
        parts = [f"{n} {status}" for status, n in sorted(self.counts.items())]
        return "\n".join([f"sweep: {', '.join(parts) or 'nothing to do'}"] + self.problems)


def run_sweep(sweep, backend: str = "local", address: str | None = None, runs_per_gpu: int | None = None,
              cpu_workers: int = 1) -> Summary:
    """Train every run of ``sweep`` that has no final result yet; return counts by outcome."""
    from tqdm.auto import tqdm

    out = sweep.out
    out.mkdir(parents=True, exist_ok=True)
    summary = Summary()
    chosen = get_backend(backend)
    options = Options(runs_per_gpu, cpu_workers, address)
    with SweepLock(out), chosen.start(out, options) as started:
        # a lazily loaded sweep checks its runs here (ConfigError), while the workers start
        todo, _ = pending(out, sweep.runs)
        summary.counts["skipped (already finished)"] = len(sweep.runs) - len(todo)
        if not todo:
            return summary
        bar = tqdm(total=len(todo), desc=f"sweep {sweep.name}", unit="run", dynamic_ncols=True)

        def finish(run, record: dict) -> None:
            record["label"] = run.label
            write_result(out, record)
            summary.add(record, run.label)
            bar.update(1)

        def running(n: int) -> None:
            state = {"running": n, "failed": summary.counts["failed"], "diverged": summary.counts["diverged"]}
            if getattr(bar, "zoo_state", None) != state:  # redraw only on change, so logs stay short
                bar.zoo_state = state
                bar.set_postfix(state)

        chosen.train(group_runs(todo), out, options, finish, running, started)
        bar.close()
    return summary


def group_runs(runs: list, max_size: int | None = None) -> list[list]:
    """Runs that differ only in ``train.lr``, gathered into groups (at most ``max_size`` runs each),
    longest expected first (epochs x examples x length x width), so no long group starts last."""
    groups: dict[str, list] = {}
    for run in runs:
        key = OmegaConf.to_container(run.cfg, resolve=True)
        key["train"].pop("lr")
        groups.setdefault(json.dumps(key, sort_keys=True, default=str), []).append(run)
    size = max_size or max(len(g) for g in groups.values())
    chunks = [g[i:i + size] for g in groups.values() for i in range(0, len(g), size)]

    def cost(group) -> float:
        c = group[0].cfg
        examples = sum(s.num_examples for s in c.task.train)
        return c.train.max_epochs * examples * c.model.d_model * max(
            s.get("input_seq_len", c.task.params.get("input_seq_len", 1)) for s in c.task.train) * len(group)

    return sorted(chunks, key=cost, reverse=True)
