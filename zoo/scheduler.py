"""Run a sweep's unfinished runs: in local worker processes (every GPU, several runs per GPU, or the
CPU) or as Ray tasks on a cluster. Results are gathered by this one process into results.jsonl.

Locally, persistent worker processes (``python -m zoo.worker``, several per GPU) take groups of runs
from a queue, longest first: the runs of one cell that differ only in lr form one group, trained side
by side in one process (``zoo.run.train_group``). Workers die with the sweep process (PR_SET_PDEATHSIG),
so a killed sweep leaves no orphan writing into its folder; a worker that crashes or passes its group's
time limit is replaced, its group is recorded as failed or timed out, and the others go on.
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from zoo.results import FINAL, SweepLock, append_jsonl, read_result, reconcile, write_json_atomic

GIB = 1 << 30
MEMORY_PER_RUN = 10 * GIB  # the default share of GPU memory one run is given
MAX_RUNS_PER_GPU = 8
# Measured on an H100 at the figure-2 cell: with CUDA graphs one run keeps the GPU about 90% busy within an
# epoch (zoo.bench.profile) and a group of 4 steps in 10.7 ms (about 4.2 s per epoch, zoo.bench.step), while 4
# eager workers sharing the GPU, each on a group of 4, took 20.7 s per group epoch: more processes stop paying
# once the GPU is busy. A second worker fills the gaps between epochs (validation, data, graph capture);
# 2 against 1 or 4 with graphs on is not measured yet.
WORKERS_PER_GPU = 2
HANG_GRACE_S = 60.0  # a group with train.timeout that has no result this long after it is counted as hung


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


def default_runs_per_gpu() -> int:
    """How many runs share a GPU when the sweep does not say: one per MEMORY_PER_RUN of its memory."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    return max(1, min(MAX_RUNS_PER_GPU, total // MEMORY_PER_RUN))


def _die_with_parent() -> None:  # runs in the child between fork and exec (Linux)
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def prepare_run_dir(out: Path, run) -> Path:
    """The folder of a run that has not finished: an interrupted try's checkpoint is kept (the run resumes
    from it; the id is the config's hash, so it is the same config), other leftovers are removed."""
    from zoo import checkpoint

    run_dir = out / "runs" / run.id
    if run_dir.exists() and not (run_dir / checkpoint.NAME).exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(run.cfg, run_dir / "config.yaml")
    return run_dir


def crash_record(run, returncode: int, log: Path) -> dict:
    """The record of a worker that died without writing its result (segfault, killed, ...)."""
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    return {"id": run.id, "status": "failed", "error": f"worker exited with code {returncode}\n{tail}",
            "label": run.label, "task": run.cfg.task.name, "mixer": run.cfg.model.mixer, "history": []}


def run_sweep(sweep, backend: str = "local", address: str | None = None, runs_per_gpu: int | None = None,
              cpu_workers: int = 1) -> Summary:
    """Train every run of ``sweep`` that has no final result yet; return counts by outcome."""
    from tqdm.auto import tqdm

    out = sweep.out
    out.mkdir(parents=True, exist_ok=True)
    summary = Summary()
    with SweepLock(out):
        done = reconcile(out)
        todo = [r for r in sweep.runs if r.id not in done]
        summary.counts["skipped (already finished)"] = len(sweep.runs) - len(todo)
        if not todo:
            return summary
        bar = tqdm(total=len(todo), desc=f"sweep {sweep.name}", unit="run", dynamic_ncols=True)

        def finish(run, record: dict) -> None:
            record["label"] = run.label
            write_json_atomic(out / "runs" / run.id / "result.json", record)
            append_jsonl(out / "results.jsonl", record)
            summary.add(record, run.label)
            bar.update(1)

        if backend == "ray":
            _run_ray(todo, out, address, runs_per_gpu, finish, bar, summary)
        else:
            _run_local(todo, out, runs_per_gpu, cpu_workers, finish, bar, summary)
        bar.close()
    return summary


def _set_postfix(bar, running: int, summary: Summary) -> None:
    state = {"running": running, "failed": summary.counts["failed"], "diverged": summary.counts["diverged"]}
    if getattr(bar, "zoo_state", None) != state:  # redraw only on change, so logs stay short
        bar.zoo_state = state
        bar.set_postfix(state)


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


class Worker:
    """One persistent ``python -m zoo.worker`` process on one slot (a GPU index, or "" for the CPU)."""

    def __init__(self, slot: str, threads: int, log: Path):
        self.slot, self.log = slot, log
        read_fd, write_fd = os.pipe()
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": slot, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log_file = open(log, "a")
        self.proc = subprocess.Popen([sys.executable, "-m", "zoo.worker", str(write_fd)], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     pass_fds=(write_fd,), preexec_fn=_die_with_parent)
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "r")
        self.group: list | None = None
        self.started = 0.0

    def start(self, group: list, run_dirs: list[Path]) -> None:
        self.group, self.started = group, time.time()
        try:
            self.proc.stdin.write(json.dumps([str(d) for d in run_dirs]) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # the worker died: the loop records its group as failed
            pass

    def time_limit(self) -> float | None:
        """Seconds after which the group counts as hung: its longest train.timeout plus HANG_GRACE_S."""
        limits = [r.cfg.train.get("timeout") for r in self.group or []]
        return None if any(x is None for x in limits) or not limits else max(limits) + HANG_GRACE_S

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.replies.close()
        self.log_file.close()


def default_workers_per_gpu() -> int:
    """Worker processes per GPU when the sweep does not say: one per MEMORY_PER_RUN of its memory, at most
    WORKERS_PER_GPU (see there)."""
    return min(WORKERS_PER_GPU, default_runs_per_gpu())


def _run_local(todo, out, runs_per_gpu, cpu_workers, finish, bar, summary) -> None:
    import torch

    n_gpus = torch.cuda.device_count()
    if n_gpus:
        per_gpu = runs_per_gpu or default_workers_per_gpu()
        slots = [str(g) for _ in range(per_gpu) for g in range(n_gpus)]
    else:
        slots = [""] * max(1, cpu_workers)
    threads = max(1, (os.cpu_count() or 1) // len(slots))
    queue = group_runs(todo)
    workers: list[Worker] = []
    idle_deaths = 0

    def settle(worker: Worker, dead: bool) -> None:
        """Record the worker's group: each run's result.json, or a crash/timeout record."""
        for run in worker.group:
            record = read_result(out / "runs" / run.id)
            if record is None or record.get("status") not in FINAL + ("failed", "timeout"):
                record = crash_record(run, worker.proc.returncode if dead else -9, worker.log)
                if not dead:
                    record.update(status="timeout", error=f"no result {worker.time_limit():.0f} s after the start "
                                                          "(train.timeout plus HANG_GRACE_S): the worker was stopped")
            finish(run, record)
        worker.group = None

    try:
        workers = [Worker(slot, threads, out / "workers" / f"{i}.log") for i, slot in enumerate(slots)]
        while queue or any(w.group for w in workers):
            for i, w in enumerate(workers):
                if w.proc.poll() is not None or (w.group and w.time_limit() and time.time() - w.started > w.time_limit()):
                    if w.group:
                        dead = w.proc.poll() is not None
                        w.stop()
                        settle(w, dead)
                    else:  # died with nothing to do: it cannot start (a broken install); do not respawn forever
                        w.stop()
                        idle_deaths += 1
                        if idle_deaths > 3:
                            tail = w.log.read_text(errors="replace")[-2000:] if w.log.exists() else ""
                            raise RuntimeError(f"sweep workers exit before training anything:\n{tail}")
                    workers[i] = w = Worker(w.slot, threads, w.log)
                if w.group is None and queue:
                    group = queue.pop(0)
                    w.start(group, [prepare_run_dir(out, run) for run in group])
            _set_postfix(bar, sum(len(w.group or []) for w in workers), summary)
            busy = [w for w in workers if w.group]
            ready, _, _ = select.select([w.replies for w in busy], [], [], 0.2)
            for w in busy:
                if w.replies in ready and w.replies.readline():
                    settle(w, dead=False)
    finally:  # on Ctrl-C or any error: stop the workers; their runs stay unfinished
        for w in workers:
            w.stop()


def _ray_train(cfg_yaml: str) -> tuple[dict, str]:
    """A Ray task: train one run in a scratch folder; return its record and metrics.csv text."""
    import tempfile

    from zoo.run import train

    cfg = OmegaConf.create(cfg_yaml)
    with tempfile.TemporaryDirectory() as tmp:
        record = train(cfg, Path(tmp), quiet=True)
        metrics = Path(tmp) / "metrics.csv"
        return record, metrics.read_text() if metrics.exists() else ""


def _run_ray(todo, out, address, runs_per_gpu, finish, bar, summary) -> None:
    from zoo.optional import optional_import

    ray = optional_import("ray", "the ray backend")
    if ray is None:
        from zoo.errors import ConfigError

        raise ConfigError("--backend", "ray", "'local', or install Ray first: pip install -e .[ray]")
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False) if address else \
            ray.init(include_dashboard=False, log_to_driver=False)
    gpus = ray.cluster_resources().get("GPU", 0)
    options = {"num_gpus": 1 / (runs_per_gpu or MAX_RUNS_PER_GPU // 2), "num_cpus": 1} if gpus else {"num_cpus": 1}
    task = ray.remote(_ray_train).options(**options)
    pending = {}
    for run in todo:
        prepare_run_dir(out, run)
        pending[task.remote(OmegaConf.to_yaml(run.cfg))] = run
    try:
        while pending:
            _set_postfix(bar, len(pending), summary)
            ready, _ = ray.wait(list(pending), num_returns=1)
            run = pending.pop(ready[0])
            try:
                record, metrics = ray.get(ready[0])
                (out / "runs" / run.id / "metrics.csv").write_text(metrics)
            except Exception as err:  # the task's process died (OOM-killed node, lost worker)
                record = crash_record(run, -1, Path("/nonexistent"))
                record["error"] = f"ray task failed: {err}"
            finish(run, record)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
