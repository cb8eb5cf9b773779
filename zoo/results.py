"""The on-disk layout of a sweep, written so that no finished result is ever lost or doubled.

    <out>/sweep.lock            held (flock) by the one sweep process that owns the folder
    <out>/results.jsonl         append-only, one final record per run id
    <out>/runs/<id>/config.yaml the resolved run config
    <out>/runs/<id>/metrics.csv Lightning's CSV log
    <out>/runs/<id>/result.json the run's final record, written atomically before it is appended

A record reaches results.jsonl only after its result.json exists, so a sweep killed between the
two steps repairs the log on its next start (``reconcile``) instead of running the run again.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

FINAL = ("completed", "diverged")  # outcomes a rerun keeps; "failed" runs are tried again


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


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON to a temporary file beside ``path``, fsync it, then rename it into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def append_jsonl(path: Path, record: dict) -> None:
    """Append one JSON line with a single write on an O_APPEND descriptor, then fsync."""
    line = (json.dumps(record, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict]:
    """All complete records of a results file (a torn last line from a crash is skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def read_result(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / "result.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def reconcile(out: Path) -> dict[str, dict]:
    """Make results.jsonl hold every final result.json exactly once; return the final records by id."""
    out = Path(out)
    logged = {r["id"]: r for r in read_jsonl(out / "results.jsonl") if r.get("status") in FINAL}
    for run_dir in sorted((out / "runs").glob("*")):
        record = read_result(run_dir)
        if record and record.get("status") in FINAL and record["id"] not in logged:
            append_jsonl(out / "results.jsonl", record)
            logged[record["id"]] = record
    return logged


def latest_records(out: Path) -> list[dict]:
    """The newest record per run id, in the order the runs first appeared."""
    latest: dict[str, dict] = {}
    for record in read_jsonl(Path(out) / "results.jsonl"):
        latest[record["id"]] = record
    return list(latest.values())
