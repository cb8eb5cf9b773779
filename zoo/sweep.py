"""Expand a sweep YAML into runs, train the ones not finished yet, and print a leaderboard.

    python -m zoo.sweep sweeps/mqar.yaml [key=value ...] [--dry-run] [--list] [--backend ray]

A sweep file::

    name: mqar                   # default: the file's stem
    out: outputs/mqar            # default: outputs/<name>
    base: {task: ..., model: ..., train: ..., seed: 0}   # a run config (see zoo.config)
    grid:                        # the sweep is the cartesian product of the axes, in order
      model.mixer: [softmax, swa]            # a dotted key with a list of values
      shape:                                 # a tied axis: each value sets several keys together
        - {task.params.input_seq_len: 128, task.params.num_kv_pairs: 8, train.batch_size: 256}
        - {task.params.input_seq_len: 256, task.params.num_kv_pairs: 16, train.batch_size: 256}
    mixer_kwargs:                # per-mixer constructor kwargs, applied when that mixer runs
      swa: {num_heads: 2}
    runs_per_gpu: null           # runs sharing one GPU; null picks from the GPU's memory

Overrides are omegaconf dotlists on ``base``; an override of a grid axis key pins that axis.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from zoo.config import make_run_config, run_id, validate
from zoo.errors import ConfigError

SWEEP_KEYS = ("name", "out", "base", "grid", "mixer_kwargs", "runs_per_gpu")


@dataclass
class Run:
    id: str
    cfg: DictConfig
    label: str  # the grid values that make this run, for humans


@dataclass
class Sweep:
    name: str
    out: Path
    runs: list[Run]
    runs_per_gpu: int | None


def _axis_settings(name: str, value) -> dict:
    """The {dotted key: value} settings that one value of a grid axis stands for."""
    if isinstance(value, (dict, DictConfig)):
        return dict(value)
    if "." not in name:
        raise ConfigError(f"grid.{name}", value, "a dotted key such as model.d_model, or a list of "
                                                  "{dotted key: value} dicts for a tied axis")
    return {name: value}


def load_sweep(path: str | Path, overrides: list[str] = (), out: str | None = None) -> Sweep:
    """Read, expand and validate a sweep file; raises ConfigError before anything runs."""
    path = Path(path)
    if not path.exists():
        raise ConfigError("sweep", str(path), "an existing YAML file")
    spec = OmegaConf.load(path)
    for key in spec:
        if key not in SWEEP_KEYS:
            raise ConfigError(f"sweep.{key}", spec[key], list(SWEEP_KEYS))
    name = spec.get("name") or path.stem
    grid = dict(spec.get("grid") or {})
    base = OmegaConf.create(spec.get("base") or {})
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("override", item, "key=value")
        if key in grid:  # pin a grid axis to the given value
            grid[key] = [OmegaConf.select(OmegaConf.from_dotlist([item]), key)]
        else:
            base = OmegaConf.merge(base, OmegaConf.from_dotlist([item]))
    for axis, values in grid.items():
        if not isinstance(values, (list, ListConfig)) or not values:
            raise ConfigError(f"grid.{axis}", values, "a non-empty list of values")
    per_mixer = spec.get("mixer_kwargs") or {}

    runs, seen = [], set()
    for combo in itertools.product(*[[(axis, v) for v in values] for axis, values in grid.items()]):
        raw = base.copy()
        labels = []
        for axis, value in combo:
            for key, v in _axis_settings(axis, value).items():
                OmegaConf.update(raw, key, v, merge=False)
            labels.append(f"{axis}={OmegaConf.to_container(value) if OmegaConf.is_config(value) else value}")
        mixer = OmegaConf.select(raw, "model.mixer", default="softmax")
        if mixer in per_mixer:
            kwargs = OmegaConf.merge(per_mixer[mixer], OmegaConf.select(raw, "model.mixer_kwargs", default={}))
            OmegaConf.update(raw, "model.mixer_kwargs", kwargs, merge=False)
        label = ", ".join(labels) or "base"
        try:
            cfg = make_run_config(raw)
            validate(cfg)
        except ConfigError as err:
            raise ConfigError(err.key, err.value, f"{err.allowed} (in run {label})") from None
        rid = run_id(cfg)
        if rid not in seen:
            seen.add(rid)
            runs.append(Run(rid, cfg, label))
    rpg = spec.get("runs_per_gpu")
    if rpg is not None and (not isinstance(rpg, int) or rpg < 1):
        raise ConfigError("sweep.runs_per_gpu", rpg, "an integer >= 1 or null")
    return Sweep(name, Path(out or spec.get("out") or f"outputs/{name}"), runs, rpg)


def list_registered() -> str:
    from tasks import list_tasks
    from zoo.registry import list_mixers

    return f"mixers: {', '.join(list_mixers())}\ntasks:  {', '.join(list_tasks())}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.sweep", description="Run a sweep of training runs.")
    parser.add_argument("sweep", nargs="?", help="sweep YAML, e.g. sweeps/mqar.yaml")
    parser.add_argument("overrides", nargs="*", help="omegaconf dotlist on the base config, e.g. train.max_epochs=4")
    parser.add_argument("--out", help="output folder (default: the sweep's `out`, else outputs/<name>)")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    parser.add_argument("--list", action="store_true", help="list registered mixers and tasks and exit")
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    parser.add_argument("--runs-per-gpu", type=int, help="runs sharing one GPU (overrides the sweep file)")
    parser.add_argument("--cpu-workers", type=int, default=1, help="parallel runs on a machine without GPU")
    args = parser.parse_intermixed_args(argv)
    if args.list:
        print(list_registered())
        return 0
    if not args.sweep:
        parser.error("a sweep file is required (or --list)")
    try:
        sweep = load_sweep(args.sweep, args.overrides, args.out)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        for run in sweep.runs:
            status = "done" if (sweep.out / "runs" / run.id / "result.json").exists() else "todo"
            print(f"{run.id}  {status}  {run.label}")
        print(f"{len(sweep.runs)} runs -> {sweep.out}")
        return 0

    from zoo.leaderboard import print_and_save
    from zoo.results import SweepLocked
    from zoo.scheduler import run_sweep

    try:
        summary = run_sweep(sweep, backend=args.backend, address=args.address,
                            runs_per_gpu=args.runs_per_gpu or sweep.runs_per_gpu, cpu_workers=args.cpu_workers)
    except SweepLocked as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("\ninterrupted: finished runs are kept; rerun the same command to continue", file=sys.stderr)
        return 130
    print_and_save(sweep.out)
    print(summary.describe())
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())
