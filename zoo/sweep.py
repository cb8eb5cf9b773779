"""Expand a sweep YAML into runs, train the ones not finished yet, and print a leaderboard.

    python -m zoo.sweep sweeps/mqar.yaml [key=value ...] [--only key=value ...] [--dry-run | --count] [--list]
                        [--backend ray]

A sweep file::

    name: mqar                   # default: the file's stem; letters, digits, _ . - (no paths)
    out: outputs/mqar            # default: outputs/<name>; every file of the sweep stays under it
    base: {task: ..., model: ..., train: ..., seed: 0}   # a run config (see zoo.config); required
    grid:                        # the sweep is the cartesian product of the axes, in order
      model.mixer: [softmax, swa]            # a run-config key with a list of values (seed too)
      shape:                                 # a tied axis: each value sets several keys together
        - {task.params.input_seq_len: 128, task.params.num_kv_pairs: 8, train.batch_size: 256}
        - {task.params.input_seq_len: 256, task.params.num_kv_pairs: 16, train.batch_size: 256}
    seeds: 3                     # shorthand for a first axis seed: [0, 1, 2]
    mixer_kwargs:                # per-mixer constructor kwargs, applied when that mixer runs
      swa: {num_heads: 2}
    runs_per_gpu: null           # runs sharing one GPU; null picks from the GPU's memory
    extends: other.yaml          # optional: this file is another sweep file (path relative to this one) changed:
                                 # base and mixer_kwargs merged key by key into its, grid axes replaced or added by
                                 # name, seeds and runs_per_gpu replaced; name and out are never inherited

Overrides (``key=value``): a grid axis key pins that axis; ``mixer_kwargs.<mixer>.<key>`` sets one
mixer's kwarg; any other run-config key is set in ``base`` and wins over a tied axis that sets it
too. Two axes may not set the same key. The runs are expanded lazily, so ``--dry-run`` and
``--count`` of a huge grid start at once and use flat memory.

Selections (``--only key=value``, repeatable) train part of a sweep without changing it: only the runs
whose config has that value for that key (``--only task.params.input_seq_len=128 --only model.mixer=swa``);
one key given several times keeps the runs with any of its values (``--only model.mixer=swa --only model.mixer=based``),
with the same run ids and folders as in the whole sweep, so a slice can be run first and the rest later.
Overrides change runs (new ids); selections only choose among them. A selection reads the base and the grid,
not the ``mixer_kwargs`` block (select by ``model.mixer`` there).

Exit codes: 0 all runs finished, 1 some run failed, 2 a configuration error (nothing ran),
3 the output folder is busy or could not be written, 130 interrupted.
"""
from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, Field, ValidationError

from zoo.backends import BACKENDS
from zoo.config import PositiveInt, RunConfig, Schema, check_mixer_kwargs, check_run, import_user_modules, plain, \
    resolve, run_id, schema_error
from zoo.errors import ConfigError
from zoo.mixers.registry import get_mixer
from zoo.results import Run


class SweepSpec(Schema):
    """The keys of a sweep file, with their types."""

    name: Optional[Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")]] = None
    out: Optional[str] = None
    base: dict[str, Any] = Field(description="a run config: task, model, train, seed, imports")
    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = {}
    seeds: Optional[PositiveInt] = None
    mixer_kwargs: dict[str, dict[str, Any]] = {}
    runs_per_gpu: Optional[PositiveInt] = None


@dataclass
class Axis:
    name: str
    settings: list[dict]  # per value: {dotted key: value}, resolved, all distinct
    labels: list[str]


@dataclass
class Sweep:
    name: str
    out: Path
    runs_per_gpu: int | None
    base: dict = field(repr=False)  # resolved run config every run starts from
    axes: list[Axis] = field(repr=False)
    mixer_kwargs: dict = field(repr=False)

    @property
    def count(self) -> int:
        """The number of runs, without expanding them (axis values are distinct, so runs are too)."""
        return math.prod(len(a.settings) for a in self.axes)

    def iter_runs(self) -> Iterator[Run]:
        """Expand and check one run at a time (ConfigError names the run)."""
        for combo in itertools.product(*[range(len(a.settings)) for a in self.axes]):
            config, fresh = dict(self.base), set()  # copy on write: only the dicts on a set key's path
            for axis, i in zip(self.axes, combo):
                for key, value in axis.settings[i].items():
                    _set(config, key, _copy(value), fresh)
            model = config["model"]
            _set(config, "model.mixer_kwargs", {**self.mixer_kwargs.get(model["mixer"], {}), **model["mixer_kwargs"]},
                 fresh)
            label = ", ".join(a.labels[i] for a, i in zip(self.axes, combo)) or "base"
            try:
                check_run(config)
            except ConfigError as err:
                raise ConfigError(err.key, err.value, f"{err.allowed} (in run {label})") from None
            yield Run(run_id(config), config, label)

    @functools.cached_property
    def runs(self) -> list[Run]:
        return list(self.iter_runs())


def _copy(tree):
    if isinstance(tree, dict):
        return {k: _copy(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_copy(v) for v in tree]
    return tree


def _set(tree: dict, key: str, value, fresh: set | None = None) -> None:
    """Set dotted ``key`` in ``tree``. With ``fresh`` (the paths already copied), the dicts on the
    path are copied before their first change, so a tree that shares its other dicts stays intact."""
    *parents, last = key.split(".")
    path = ""
    for name in parents:
        path += "." + name
        child = tree.get(name)
        if not isinstance(child, dict):
            tree[name] = {}
        elif fresh is not None and path not in fresh:
            tree[name] = dict(child)
        if fresh is not None:
            fresh.add(path)
        tree = tree[name]
    tree[last] = value


def _with(base: dict, setting: dict) -> dict:
    """A copy of ``base`` with ``setting`` ({dotted key: value}) set in it; ``base`` stays as it is."""
    config = _copy(base)
    for key, value in setting.items():
        _set(config, key, _copy(value))
    return config


def _get(tree: dict, key: str):
    for name in key.split("."):
        tree = tree[name]
    return tree


def is_config_key(key: str) -> bool:
    """Whether ``key`` names a run-config key: ``model.d_model``, ``seed``, ``task.params.anything``."""
    schema: Any = RunConfig
    for name in key.split("."):
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            return schema is dict  # below a free-form dict (task.params, model.mixer_kwargs)
        field_info = schema.model_fields.get(name)
        if field_info is None:
            return False
        schema = field_info.annotation
        schema = dict if getattr(schema, "__origin__", None) is dict else schema
    return True


def read_spec(path: Path, key: str = "sweep", extended_by: tuple[Path, ...] = ()) -> dict:
    """The sweep file as a plain dict, merged onto the file it ``extends``; every way it can be unreadable is a
    ConfigError (``key`` names the file in it: ``sweep``, or ``sweep.extends`` for a file another one extends)."""
    if not path.is_file():
        raise ConfigError(key, str(path), "an existing YAML file")
    try:
        spec = OmegaConf.load(path)
    except (OSError, UnicodeError, yaml.YAMLError, OmegaConfBaseException, ValueError) as err:
        raise ConfigError(key, str(path), f"a readable YAML file ({str(err).splitlines()[0]})") from None
    if not isinstance(spec, DictConfig):
        raise ConfigError(key, type(plain(spec)).__name__,
                          f"a mapping with keys {', '.join(SweepSpec.model_fields)}, extends")
    spec = plain(spec)
    parent = spec.pop("extends", None)
    if parent is None:
        return spec
    if not isinstance(parent, str):
        raise ConfigError("sweep.extends", parent, "the path of another sweep file, relative to this one")
    parent_path = path.parent / parent
    chain = (*extended_by, path.resolve())
    if parent_path.resolve() in chain:
        raise ConfigError("sweep.extends", parent, f"a sweep file that does not extend {path} again (a cycle)")
    return _extend(read_spec(parent_path, "sweep.extends", chain), spec)


def _extend(parent: dict, child: dict) -> dict:
    """``child``'s keys applied to ``parent``: ``base`` and ``mixer_kwargs`` merged key by key (lists replaced),
    ``grid`` axes replaced in place or added at the end, other keys replaced; ``name`` and ``out`` are the
    child's own (None: from its file name), so a sweep that extends another never writes into its folder."""
    merged = {k: v for k, v in parent.items() if k not in ("name", "out")}
    for k, v in child.items():
        if k in ("base", "mixer_kwargs") and isinstance(v, dict) and isinstance(parent.get(k), dict):
            merged[k] = plain(OmegaConf.merge(OmegaConf.create(parent[k]), OmegaConf.create(v)))
        elif k == "grid" and isinstance(v, dict) and isinstance(parent.get(k), dict):
            merged[k] = {**parent[k], **v}
        else:
            merged[k] = v
    return merged


def _parse_override(item: str):
    key, sep, _ = item.partition("=")
    if not sep or not key:
        raise ConfigError("override", item, "key=value")
    try:
        return key, plain(OmegaConf.select(OmegaConf.from_dotlist([item]), key))
    except OmegaConfBaseException as err:
        raise ConfigError("override", item, f"key=value ({str(err).splitlines()[0]})") from None


def _apply_overrides(spec: dict, overrides) -> set[str]:
    """Apply CLI overrides to ``spec`` in place; return the base keys they set (tied axes drop them)."""
    pinned = set()
    for item in overrides:
        key, value = _parse_override(item)
        if key.startswith("mixer_kwargs."):
            parts = key.split(".", 2)
            if len(parts) < 3:
                raise ConfigError("override", item, "mixer_kwargs.<mixer>.<key>=value")
            spec["mixer_kwargs"].setdefault(parts[1], {})[parts[2]] = value
        elif key in spec["grid"]:  # pin a grid axis to one value
            spec["grid"][key] = [value]
        elif not is_config_key(key):
            raise ConfigError(key, value, "a run-config key (see zoo/config.py), a grid axis, or "
                                          "mixer_kwargs.<mixer>.<key>")
        else:
            _set(spec["base"], key, value)
            pinned.add(key)
    return pinned


def _axis(name: str, values: list, base: dict, pinned: set[str]) -> Axis:
    """One grid axis, each value resolved against ``base`` (types and ranges), duplicates dropped."""
    settings, labels, seen = [], [], set()
    for value in values:
        if is_config_key(name):
            setting = {name: value}
        elif isinstance(value, dict) and value:
            setting = {k: v for k, v in value.items()
                       if not any(k == p or k.startswith(p + ".") for p in pinned)}  # an override wins
            for key in setting:
                if not is_config_key(key):
                    raise ConfigError(f"grid.{name}.{key}", setting[key], "a run-config key such as train.batch_size")
        else:
            raise ConfigError(f"grid.{name}", value, "a run-config key such as model.d_model or seed, or a list "
                                                     "of {key: value} dicts for a tied axis")
        try:
            resolved = resolve(_with(base, setting))
        except ConfigError as err:
            raise ConfigError(err.key, err.value, f"{err.allowed} (in grid.{name})") from None
        setting = {key: _get(resolved, key) for key in setting}
        canon = repr(sorted(setting.items()))
        if canon in seen:
            continue
        seen.add(canon)
        settings.append(setting)
        shown = next(iter(setting.values())) if is_config_key(name) else setting
        labels.append(f"{name}={shown}")
    return Axis(name, settings, labels)


def _check_disjoint(axes: list[Axis]) -> None:
    owner: dict[str, str] = {}
    for axis in axes:
        for key in {k for s in axis.settings for k in s}:
            for other_key, other in owner.items():
                if other != axis.name and (key == other_key or key.startswith(other_key + ".")
                                           or other_key.startswith(key + ".")):
                    raise ConfigError(f"grid.{axis.name}", key, f"a key no other axis sets (grid.{other} sets it)")
            owner[key] = axis.name


def _selection(base: dict, items: list[str]) -> dict[str, list]:
    """``--only`` items (``key=value``) -> {key: [values]}, each value in the form every run's config has
    (1e-3 -> 0.001); a key given several times keeps all its values."""
    chosen: dict[str, list] = {}
    for item in items:
        try:
            key, value = _parse_override(item)
        except ConfigError as err:
            raise ConfigError("--only", item, err.allowed) from None
        if not is_config_key(key):
            raise ConfigError("--only", item, "key=value with a run-config key, e.g. model.mixer=swa")
        try:
            chosen.setdefault(key, []).append(_get(resolve(_with(base, {key: value})), key))
        except ConfigError as err:
            raise ConfigError("--only", item, err.allowed) from None
    return chosen


def _select(axes: list[Axis], base: dict, key: str, chosen: list) -> list[Axis]:
    """``axes`` narrowed to the runs whose resolved config has one of the ``chosen`` values for ``key``."""

    def value_with(setting: dict):
        try:
            return _get(_with(base, setting), key)
        except (KeyError, TypeError):
            return None

    def touches(axis: Axis) -> bool:
        return any(k == key or key.startswith(k + ".") or k.startswith(key + ".") for s in axis.settings for k in s)

    seen = [value_with({})]
    narrowed = []
    for axis in axes:
        if touches(axis):
            values = [value_with(setting) for setting in axis.settings]
            seen = values
            keep = [i for i, v in enumerate(values) if v in chosen]
            axis = Axis(axis.name, [axis.settings[i] for i in keep], [axis.labels[i] for i in keep])
        narrowed.append(axis)
    missing = [value for value in chosen if value not in seen]
    if missing or any(not a.settings for a in narrowed):
        shown = sorted({repr(v) for v in seen})
        raise ConfigError("--only", " ".join(f"{key}={value}" for value in missing or chosen),
                          f"a value some run of the sweep has for {key}: {', '.join(shown)}")
    return narrowed


def load_sweep(path: str | Path, overrides: list[str] = (), out: str | None = None, lazy: bool = False,
               only: list[str] = ()) -> Sweep:
    """Read and check a sweep file; raises ConfigError before anything runs.

    Unless ``lazy``, every run is expanded and checked here; with ``lazy``, the file, the base and
    each axis value are checked here, and each run when ``iter_runs`` reaches it."""
    path = Path(path)
    raw = read_spec(path)
    try:
        spec = SweepSpec.model_validate(raw).model_dump()
    except ValidationError as err:
        loc = err.errors()[0]["loc"]
        raise schema_error(err, SweepSpec, "sweep." if len(loc) == 1 else "") from None
    name = spec["name"] or path.stem
    if spec["seeds"] is not None:
        if "seed" in spec["grid"]:
            raise ConfigError("sweep.seeds", spec["seeds"], "null when the grid has a seed axis")
        spec["grid"] = {"seed": list(range(spec["seeds"])), **spec["grid"]}
    pinned = _apply_overrides(spec, overrides)
    try:
        base = resolve(spec["base"])
        import_user_modules(base)  # user mixers must be registered before mixer_kwargs are checked
    except ConfigError as err:
        raise ConfigError(err.key, err.value, f"{err.allowed} (in base)") from None
    for mixer, kwargs in spec["mixer_kwargs"].items():
        try:
            get_mixer(mixer)
        except ConfigError as err:
            raise ConfigError(f"mixer_kwargs.{mixer}", kwargs, f"kwargs of a registered mixer, {err.allowed}") from None
        check_mixer_kwargs(mixer, kwargs, f"mixer_kwargs.{mixer}")
    axes = [_axis(axis, values, base, pinned) for axis, values in spec["grid"].items()]
    _check_disjoint(axes)
    for key, chosen in _selection(base, list(only)).items():
        axes = _select(axes, base, key, chosen)
    sweep = Sweep(name, Path(out or spec["out"] or f"outputs/{name}"), spec["runs_per_gpu"], base, axes,
                  spec["mixer_kwargs"])
    if not lazy:
        sweep.runs  # noqa: B018 -- expands and checks every run now
    return sweep


def list_registered() -> str:
    from zoo.tasks import list_tasks
    from zoo.mixers.registry import list_mixers

    return f"mixers: {', '.join(list_mixers())}\ntasks:  {', '.join(list_tasks())}"


def dry_run(sweep: Sweep) -> None:
    """Print every run with what the sweep would do with it (the answer ``final_records`` gives)."""
    from zoo.results import FINAL, run_states

    states = run_states(sweep.out)
    print(f"{sweep.count} runs -> {sweep.out}", flush=True)
    tally: Counter = Counter()
    for run in sweep.iter_runs():
        state = states.get(run.id)
        action = "done" if state in FINAL else "retry" if state else "todo"
        tally[action] += 1
        print(f"{run.id}  {action:5}  {state or '-':9}  {run.label}")
    print(f"{sweep.count} runs ({', '.join(f'{n} {a}' for a, n in sorted(tally.items()))}) -> {sweep.out}")


def _remove_unused(out: Path) -> None:
    """Remove what a refused sweep left in the output folder it created: the lock and the logs of the workers
    that started while its runs were checked (and the folders, once empty)."""
    for log in sorted((out / "workers").glob("*.log")):
        log.unlink()
    for path in (out / "workers", out / "sweep.lock", out):
        try:
            path.unlink() if path.is_file() else path.rmdir()
        except OSError:  # not there, or something else is inside: keep it
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.sweep", description="Run a sweep of training runs.")
    parser.add_argument("sweep", nargs="?", help="sweep YAML, e.g. sweeps/mqar.yaml")
    parser.add_argument("overrides", nargs="*", help="omegaconf dotlist on the base config, e.g. train.max_epochs=4")
    parser.add_argument("--out", help="output folder (default: the sweep's `out`, else outputs/<name>)")
    parser.add_argument("--only", action="append", default=[], metavar="KEY=VALUE",
                        help="train only the runs with this value (repeatable); same run ids as the whole sweep")
    parser.add_argument("--dry-run", action="store_true", help="list the runs (done, retry or todo) and exit")
    parser.add_argument("--count", action="store_true", help="print the number of runs and exit")
    parser.add_argument("--list", action="store_true", help="list registered mixers and tasks and exit")
    parser.add_argument("--backend", choices=BACKENDS, default="local")
    parser.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    parser.add_argument("--runs-per-gpu", type=int, help="runs sharing one GPU (overrides the sweep file)")
    parser.add_argument("--cpu-workers", type=int, default=1, help="parallel runs on a machine without GPU")
    args = parser.parse_intermixed_args(argv)
    if args.list:
        print(list_registered())
        return 0
    if not args.sweep:
        parser.error("a sweep file is required (or --list)")
    from zoo.results import SweepLocked, check_writable

    try:
        for flag, value in (("--runs-per-gpu", args.runs_per_gpu), ("--cpu-workers", args.cpu_workers)):
            if value is not None and value < 1:
                raise ConfigError(flag, value, "an integer >= 1")
        # lazily: a training sweep checks its runs in run_sweep, while its workers start
        sweep = load_sweep(args.sweep, args.overrides, args.out, lazy=True, only=args.only)
        if args.count:
            print(sweep.count)
            return 0
        if args.dry_run:
            try:
                dry_run(sweep)
            except BrokenPipeError:  # `--dry-run | head`: the reader has seen enough
                sys.stdout = open(os.devnull, "w")
            return 0
        created = not sweep.out.exists()
        check_writable(sweep.out)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    from zoo.leaderboard import print_and_save
    from zoo.scheduler import run_sweep

    try:
        summary = run_sweep(sweep, backend=args.backend, address=args.address,
                            runs_per_gpu=args.runs_per_gpu or sweep.runs_per_gpu, cpu_workers=args.cpu_workers)
    except ConfigError as err:  # a run failed its check: nothing trained
        if created:
            _remove_unused(sweep.out)
        print(f"error: {err}", file=sys.stderr)
        return 2
    except SweepLocked as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    except OSError as err:
        print(f"error: cannot write to {sweep.out}: {err}; finished results are kept, rerun to continue",
              file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("\ninterrupted: finished runs are kept; rerun the same command to continue", file=sys.stderr)
        return 130
    print_and_save(sweep.out)
    print(summary.describe())
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())
