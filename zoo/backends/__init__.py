"""Where a sweep's runs train, chosen by name: ``local`` (worker processes on this machine's GPUs or CPU,
``zoo.backends.local``) or ``ray`` (Ray tasks on a cluster, ``zoo.backends.ray``; Ray is imported only there).

A backend is a module with two functions::

    start(out, options) -> context manager     what can start before the runs are checked (local: the workers)
    train(groups, out, options, finish, running, started) -> None

``start`` is entered once the sweep folder is locked and before the sweep's runs are expanded and checked, so
what it starts overlaps that check; ``started`` is what it yielded. It stops what it started on exit, also when
the check raises ConfigError. ``groups`` are lists of runs (``zoo.results.Run``: ``id``, ``cfg``, ``label``) that
differ only in lr, in the order to start them (``zoo.scheduler.group_runs``). The backend prepares each run's folder
(``zoo.results.prepare_run_dir``) before it starts, and calls ``finish(run, record)`` exactly once per run
with its result record, trained or made by :func:`crash_record`; it writes no result itself (``finish``
does, through ``zoo.results.write_result``). ``running(n)`` reports how many runs are training now.
Queueing, grouping, the lock and the results stay in ``zoo.scheduler``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from zoo.errors import ConfigError

BACKENDS = ("local", "ray")
MAX_RUNS_PER_GPU = 8


@dataclass(frozen=True)
class Options:
    """What the command line and the sweep file say about where runs go."""

    runs_per_gpu: int | None = None  # runs sharing one GPU; None: picked from the GPU's memory (local) or a default
    cpu_workers: int = 1  # parallel runs on a machine without GPU (local)
    address: str | None = None  # the Ray cluster (ray); None: start a local Ray instance


def get_backend(name: str) -> ModuleType:
    """The backend module named ``name`` (one of ``BACKENDS``)."""
    if name not in BACKENDS:
        raise ConfigError("--backend", name, list(BACKENDS))
    return importlib.import_module(f"zoo.backends.{name}")


def crash_record(run, error: str) -> dict:
    """The record of a run whose process died or hung without returning its result."""
    return {"id": run.id, "status": "failed", "error": error, "task": run.cfg.task.name,
            "mixer": run.cfg.model.mixer, "history": []}
