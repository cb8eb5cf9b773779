"""The on-disk layout of a sweep, written so that no finished result is ever lost, doubled or torn.

    <out>/sweep.lock            held (flock) by the one sweep process that owns the folder
    <out>/results.jsonl         append-only, one final record per run id
    <out>/runs/<id>/config.yaml the resolved run config
    <out>/runs/<id>/metrics.csv Lightning's CSV log
    <out>/runs/<id>/result.json the run's final record, written atomically before it is appended

One function writes a run's result, ``write_result``, in the one process that owns the folder (a
sweep, or ``python -m zoo.run``): result.json, then the line in results.jsonl, then the checkpoint
is dropped. A record reaches results.jsonl only after its result.json exists, so a process killed
between the two steps repairs the log on its next start (``reconcile``) instead of running the run again.

Whether a run is done has one answer, ``final_records``: the sweep and ``python -m zoo.run`` skip
those runs (``pending``), ``--dry-run`` marks them done and the leaderboard shows them. A run is done
when its status is in ``FINAL``, in results.jsonl or in its result.json; "failed" runs are tried
again, from their last checkpoint (``prepare_run_dir`` keeps it).
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from zoo.errors import ConfigError


@dataclass
class Run:
    """One run of a sweep (or of ``python -m zoo.run``): its id, resolved config and grid label."""

    id: str
    config: dict  # the resolved run config, plain
    label: str  # the grid values that make this run, for humans

    @cached_property
    def cfg(self) -> DictConfig:
        return OmegaConf.create(self.config)


FINAL = ("completed", "diverged", "timeout")  # outcomes a rerun keeps; "failed" runs are tried again
MIN_FREE_BYTES = 1 << 20  # an output folder with less free space is refused before training
log = logging.getLogger("zoo")


class SweepLocked(RuntimeError):
    """Another live process owns the sweep folder."""


class SweepLock:
    """An exclusive, non-blocking flock on ``<out>/sweep.lock``; the kernel drops it if we die."""

    def __init__(self, out: Path):
        self.path = Path(out) / "sweep.lock"
        self.fd: int | None = None

    def __enter__(self) -> "SweepLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise SweepLocked(f"another sweep (pid {owner}) is writing to {self.path.parent}; "
                              "wait for it to finish or choose another output folder") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def check_writable(out: Path) -> None:
    """Refuse an output folder that cannot be created, written, or that has (almost) no space left."""
    out = Path(out)
    probe = out / f".write-test.{os.getpid()}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        os.unlink(probe)
        free = shutil.disk_usage(out).free
    except OSError as err:
        raise ConfigError("out", str(out), f"a folder this user can write ({err.strerror or err})") from None
    if free < MIN_FREE_BYTES:
        raise ConfigError("out", str(out), f"a folder on a disk with free space (only {free} bytes free)")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON to a temporary file beside ``path``, fsync it, then rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a write may be short); a write of 0 bytes is an error."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(28, "No space left on device (a write wrote nothing)")
        view = view[n:]


def append_jsonl(path: Path, record: dict) -> None:
    """Append one JSON line to ``path`` and fsync it, so that it is whole or absent.

    A torn last line (from a crash or a full disk) is ended first, with a warning, so the new record
    never glues onto it (``read_jsonl`` skips the torn one). A write that fails part-way is cut off
    again before the error is raised."""
    path = Path(path)
    line = (json.dumps(record, default=str) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            log.warning("zoo: %s ends with a torn line (a crash or a full disk); it is skipped", path)
            line = b"\n" + line
        try:
            _write_all(fd, line)
            os.fsync(fd)
        except OSError as err:
            try:
                os.ftruncate(fd, size)  # leave no partial line behind
            except OSError:
                pass
            raise OSError(err.errno, f"could not append to {path}: {err.strerror}") from err
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict]:
    """All complete records of a results file (a torn line from a crash is skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_bytes().decode(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "id" in record:
            records.append(record)
    return records


def read_result(run_dir: Path) -> dict | None:
    try:
        record = json.loads((Path(run_dir) / "result.json").read_text())
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and "id" in record else None


def _logged_finals(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in read_jsonl(out / "results.jsonl") if r.get("status") in FINAL}


def _unlogged_finals(out: Path, logged: dict) -> list[dict]:
    """Final result.json files whose record did not reach results.jsonl (killed between the two)."""
    records = []
    for run_dir in sorted((out / "runs").glob("*")):
        record = read_result(run_dir)
        if record and record.get("status") in FINAL and record["id"] not in logged:
            records.append(record)
    return records


def final_records(out: Path) -> dict[str, dict]:
    """The finished runs of a sweep folder by id: the one source of truth for "done" (read-only)."""
    out = Path(out)
    finals = _logged_finals(out)
    finals.update({r["id"]: r for r in _unlogged_finals(out, finals)})
    return finals


def run_states(out: Path) -> dict[str, str]:
    """The status of every run a sweep folder knows of: its final status if it has one, else the
    status of its newest record ("failed": tried again on the next start)."""
    out = Path(out)
    states = {r["id"]: r.get("status", "?") for r in read_jsonl(out / "results.jsonl")}
    states.update({i: r["status"] for i, r in final_records(out).items()})
    return states


def reconcile(out: Path) -> dict[str, dict]:
    """Make results.jsonl hold every final result.json exactly once; return the final records by id."""
    out = Path(out)
    logged = _logged_finals(out)
    for record in _unlogged_finals(out, logged):
        append_jsonl(out / "results.jsonl", record)
        logged[record["id"]] = record
    return logged


def pending(out: Path, runs: list) -> tuple[list, dict[str, dict]]:
    """The runs (objects with ``id``) that have no final result in ``out`` yet, and the final records of
    the folder by id; ``reconcile`` repairs results.jsonl first. The caller holds the ``SweepLock``."""
    done = reconcile(out)
    return [r for r in runs if r.id not in done], done


def prepare_run_dir(out: Path, run) -> Path:
    """``<out>/runs/<id>`` of a run about to train, with its config.yaml: an interrupted try's checkpoint is
    kept (the run resumes from it; the id is the config's hash, so it is the same config), other leftovers
    are removed."""
    from omegaconf import OmegaConf

    from zoo import checkpoint

    run_dir = Path(out) / "runs" / run.id
    if run_dir.exists() and not (run_dir / checkpoint.NAME).exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(run.cfg, run_dir / "config.yaml")
    return run_dir


def write_result(out: Path, record: dict) -> None:
    """Write a run's result record: ``<out>/runs/<id>/result.json`` (atomically), then its line in
    ``<out>/results.jsonl``, then drop the run's checkpoint if the outcome is final (a failed run keeps it:
    the retry resumes). The only writer of both files; called by the process holding the ``SweepLock``."""
    from zoo import checkpoint

    run_dir = Path(out) / "runs" / record["id"]
    write_json_atomic(run_dir / "result.json", record)
    append_jsonl(Path(out) / "results.jsonl", record)
    if record["status"] in FINAL:
        checkpoint.discard(run_dir)


def latest_records(out: Path) -> list[dict]:
    """The newest record per run id, in the order the runs first appeared."""
    latest: dict[str, dict] = {}
    for record in read_jsonl(Path(out) / "results.jsonl"):
        latest[record["id"]] = record
    return list(latest.values())
