"""The Ray backend: each run is a Ray task with a fractional GPU request, trained in a scratch folder on
whichever node Ray picks; its record and metrics.csv come back to the driver, which writes them into the
sweep folder. Every node needs zoo installed; Ray is imported only when this backend is chosen.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

from zoo.backends import MAX_RUNS_PER_GPU, Options, crash_record
from zoo.results import prepare_run_dir


def _train_one(cfg_yaml: str) -> tuple[dict, str]:
    """A Ray task: train one run in a scratch folder; return its record and metrics.csv text."""
    import tempfile

    from omegaconf import OmegaConf

    from zoo.run import train as train_run

    cfg = OmegaConf.create(cfg_yaml)
    with tempfile.TemporaryDirectory() as tmp:
        record = train_run(cfg, Path(tmp), quiet=True)
        metrics = Path(tmp) / "metrics.csv"
        return record, metrics.read_text() if metrics.exists() else ""


def start(out: Path, options: Options) -> contextlib.AbstractContextManager:
    """Nothing to start ahead: Ray starts (or joins its cluster) in ``train``, only when some run is left to do."""
    return contextlib.nullcontext()


def train(groups: list[list], out: Path, options: Options, finish, running, started) -> None:
    """Train every run of ``groups`` as its own Ray task (see ``zoo.backends``)."""
    from omegaconf import OmegaConf

    from zoo.optional import optional_import

    ray = optional_import("ray", "the ray backend")
    if ray is None:
        from zoo.errors import ConfigError

        raise ConfigError("--backend", "ray", "'local', or install Ray first: pip install -e .[ray]")
    if not ray.is_initialized():
        ray.init(address=options.address, include_dashboard=False, log_to_driver=False) if options.address else \
            ray.init(include_dashboard=False, log_to_driver=False)
    gpus = ray.cluster_resources().get("GPU", 0)
    resources = {"num_gpus": 1 / (options.runs_per_gpu or MAX_RUNS_PER_GPU // 2), "num_cpus": 1} if gpus else \
        {"num_cpus": 1}
    task = ray.remote(_train_one).options(**resources)
    pending = {}
    for run in (run for group in groups for run in group):
        prepare_run_dir(out, run)
        pending[task.remote(OmegaConf.to_yaml(run.cfg))] = run
    try:
        while pending:
            running(len(pending))
            ready, _ = ray.wait(list(pending), num_returns=1)
            run = pending.pop(ready[0])
            try:
                record, metrics = ray.get(ready[0])
                (out / "runs" / run.id / "metrics.csv").write_text(metrics)
            except Exception as err:  # the task's process died (OOM-killed node, lost worker)
                record = crash_record(run, f"ray task failed: {err}")
            finish(run, record)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
