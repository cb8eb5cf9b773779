"""A run's checkpoint: ``<run_dir>/checkpoint.pt``, written at the end of every epoch, so a killed run
resumes from its last finished epoch instead of starting over.

It holds the model, the optimiser and lr-schedule states, the run's random stream, the data order's
generators, the metrics history and, once the run has stopped, its outcome: everything the next
epoch depends on, so a resumed run ends with the metrics of an uninterrupted one (exactly on CPU; on
GPU up to the usual nondeterminism of its kernels). It also holds the seconds trained so far and the
epochs of earlier resumes, so a resumed run's ``train_seconds`` counts its killed attempts too.

Written to a temporary file, fsynced and renamed, so a crash never leaves half a checkpoint; read with
``weights_only=True``. Removed once the run's ``result.json`` is written.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

NAME = "checkpoint.pt"
log = logging.getLogger("zoo")


def save(run_dir: Path, state: dict) -> None:
    path = Path(run_dir) / NAME
    tmp = path.with_name(f".{NAME}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(run_dir: Path) -> dict | None:
    """The run's checkpoint, or None if it has none (or one that cannot be read: the run starts over)."""
    path = Path(run_dir) / NAME
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - a damaged checkpoint must not stop the run
        log.warning("zoo: ignoring the unreadable checkpoint %s (%s); the run starts over", path, err)
        return None
    # written before the test-split metrics were named test/* (they were val/*): the same values
    state["history"] = [{k.replace("val/", "test/", 1): v for k, v in h.items()} for h in state["history"]]
    return state


def discard(run_dir: Path) -> None:
    """Remove the checkpoint of a run whose result is written."""
    (Path(run_dir) / NAME).unlink(missing_ok=True)
