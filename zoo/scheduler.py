"""Run a sweep's unfinished runs: in local worker processes (every GPU, several runs per GPU, or the
CPU) or as Ray tasks on a cluster. Results are gathered by this one process into results.jsonl.

Each local run is a child process (``python -m zoo.worker <run_dir>``) that dies with the sweep
process (PR_SET_PDEATHSIG), so a killed sweep leaves no orphan writing into its folder, and a run
that crashes, runs out of memory or diverges is recorded while the others go on.
"""
from __future__ import annotations

import ctypes
import os
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
    """A clean folder for a run that has not finished: leftovers of an interrupted try are removed."""
    run_dir = out / "runs" / run.id
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
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


def _run_local(todo, out, runs_per_gpu, cpu_workers, finish, bar, summary) -> None:
    import torch

    n_gpus = torch.cuda.device_count()
    if n_gpus:
        per_gpu = runs_per_gpu or default_runs_per_gpu()
        slots = [str(g) for _ in range(per_gpu) for g in range(n_gpus)]
        threads = max(1, (os.cpu_count() or 1) // len(slots))
    else:
        slots = [""] * max(1, cpu_workers)
        threads = max(1, (os.cpu_count() or 1) // len(slots))
    free, running, queue = list(slots), {}, list(todo)
    try:
        while queue or running:
            while queue and free:
                run, slot = queue.pop(0), free.pop(0)
                run_dir = prepare_run_dir(out, run)
                env = {**os.environ, "CUDA_VISIBLE_DEVICES": slot, "OMP_NUM_THREADS": str(threads),
                       "PYTHONUNBUFFERED": "1"}
                log = open(run_dir / "worker.log", "w")
                proc = subprocess.Popen([sys.executable, "-m", "zoo.worker", str(run_dir)], env=env, stdout=log,
                                        stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
                running[proc] = (run, slot, run_dir, log)
            _set_postfix(bar, len(running), summary)
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                run, slot, run_dir, log = running.pop(proc)
                log.close()
                free.append(slot)
                record = read_result(run_dir)
                if record is None or record.get("status") not in FINAL + ("failed",):
                    record = crash_record(run, proc.returncode, run_dir / "worker.log")
                finish(run, record)
    finally:  # on Ctrl-C or any error: stop the children; their runs stay unfinished
        for proc in running:
            proc.kill()
            proc.wait()


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
