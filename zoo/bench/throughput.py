"""Sweep throughput: seconds per epoch of real runs, runs-per-GPU scaling, and the grid's wall time.

Every number comes from ``zoo.run.train`` on the sweep's own configs (data generation, Lightning,
validation every epoch), with early stopping off; an epoch's time is the median over epochs after
the first (which pays for warm-up and compilation).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from zoo.config import make_run_config

TIMING_LR = 2.1544e-3


def cell_config(mixer: str, shape: dict, d_model: int, lr: float = TIMING_LR,
                sweep: str | Path = "sweeps/mqar.yaml") -> DictConfig:
    """One run config of a sweep file: its ``base`` and the mixer's ``mixer_kwargs``, plus the given
    mixer, shape settings (``{dotted key: value}``), width and lr; built without expanding the grid."""
    spec = OmegaConf.load(sweep)
    raw = OmegaConf.create(OmegaConf.to_container(spec.base))
    settings = {"model.mixer": mixer, "model.d_model": d_model, "train.lr": lr, **shape}
    for key, value in settings.items():
        OmegaConf.update(raw, key, value, merge=False)
    kwargs = (spec.get("mixer_kwargs") or {}).get(mixer)
    if kwargs is not None:
        OmegaConf.update(raw, "model.mixer_kwargs", kwargs, merge=False)
    return make_run_config(raw)


def timing_config(cfg: DictConfig, epochs: int, **train) -> DictConfig:
    """``cfg`` with early stopping off, ``epochs`` epochs, quiet, plus ``train`` overrides."""
    raw = OmegaConf.to_container(cfg)
    raw["train"].update(max_epochs=epochs, early_stop_accuracy=None, progress_bar=False, loggers=["csv"], **train)
    return make_run_config(raw)


def _timing(record: dict) -> dict:
    if record["status"] != "completed":
        return {"status": record["status"], "error": (record["error"] or "")[-300:]}
    epochs = [h["train_seconds"] for h in record["history"]]
    return {"status": "completed", "data_s": record["data_seconds"],
            "epoch_s": statistics.median(epochs[1:] or epochs), "first_epoch_s": epochs[0],
            "accuracy": [round(h["test/acc"], 4) for h in record["history"]]}


def time_run(cfg: DictConfig) -> dict:
    """Train ``cfg`` in this process; return data seconds, median epoch seconds and the accuracy curve."""
    return time_group([cfg])


def time_group(cfgs: list[DictConfig]) -> dict:
    """Train ``cfgs`` (equal but for lr) as one group in this process; the timing of the group's epochs
    and the first member's accuracy curve."""
    from zoo.run import train_group

    with tempfile.TemporaryDirectory() as tmp:
        records = train_group(cfgs, [Path(tmp) / str(i) for i in range(len(cfgs))], quiet=True)
    return _timing(records[0])


def concurrent_epoch_rate(cfg: DictConfig, runs: int) -> dict:
    """Start ``runs`` copies of ``cfg`` at once as separate processes on the current GPU.

    Returns the aggregate epochs per second (sum over runs of 1 / epoch seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cfg.yaml"
        OmegaConf.save(cfg, path)
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // runs))}
        procs = [subprocess.Popen([sys.executable, "-m", "zoo.bench.throughput", str(path)], stdout=subprocess.PIPE,
                                  text=True, env=env) for _ in range(runs)]
        results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    seconds = [r["epoch_s"] for r in results if r["status"] == "completed"]
    return {"runs": runs, "completed": len(seconds), "epochs_per_s": sum(1 / s for s in seconds),
            "epoch_s_each": statistics.median(seconds) if seconds else float("nan")}


def project_grid(spec, group_s: dict, width_factor: dict, startup_s: float, speedup: float, ref_d: int) -> dict:
    """Wall time of a sweep file's grid (mixers x shapes x widths, learning rates in groups) if every group trains
    all its epochs, over the cells the measurements cover: the mixers and lengths timed (``group_s``) and the widths
    with a measured factor (``ref_d`` and those of ``width_factor``). The cells of the sweep left out are named, so a
    bench of a slice (``--mixers``, ``--lengths``, ``--widths``) projects that slice and says so, and never prices an
    unmeasured width as the reference's.

    ``group_s[(mixer, N)]`` is a group's epoch time at the reference width ``ref_d``; ``width_factor[(N, d)]`` scales
    it to other widths (measured on softmax); ``speedup`` is the aggregate throughput of concurrent processes on one
    GPU relative to one alone.
    """
    grid = spec.grid
    epochs = spec.base.train.max_epochs
    lengths = [shape["task.params.input_seq_len"] for shape in grid["shape"]]
    factor = {(n, d): 1.0 if d == ref_d else width_factor.get((n, d)) for n in lengths for d in grid["model.d_model"]}
    covered = [(m, n, d) for m in grid["model.mixer"] for n in lengths for d in grid["model.d_model"]
               if (m, n) in group_s and factor[(n, d)] is not None]
    serial = sum(epochs * group_s[(m, n)] * factor[(n, d)] + startup_s for m, n, d in covered)

    def left_out(axis: int, values) -> list:
        return [v for v in values if v not in {cell[axis] for cell in covered}]

    return {"groups": len(covered), "epochs": epochs, "serial_hours": serial / 3600,
            "hours_one_gpu": serial / speedup / 3600,
            "left_out": {"model.mixer": left_out(0, grid["model.mixer"]), "task.params.input_seq_len": left_out(1, lengths),
                         "model.d_model": left_out(2, grid["model.d_model"])}}


if __name__ == "__main__":  # one timing process of concurrent_epoch_rate
    config = make_run_config(OmegaConf.load(sys.argv[1]))
    t0 = time.time()
    print(json.dumps({**time_run(config), "wall_s": time.time() - t0}))
