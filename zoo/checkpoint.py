"""A run's checkpoint: ``<run_dir>/checkpoint.pt``, written at the end of every epoch, so a killed run
resumes from its last finished epoch instead of starting over.

It holds the model, the optimiser and lr-schedule states, the run's random stream, the data order's
generators, the metrics history and, once the run has stopped, its outcome: everything the next
epoch depends on, so a resumed run ends with the metrics of an uninterrupted one (exactly on CPU; on
GPU up to the usual nondeterminism of its kernels). It also holds the seconds trained so far and the
epochs of earlier resumes, so a resumed run's ``train_seconds`` counts its killed attempts too.

Written to a temporary file, fsynced and renamed, so a crash never leaves half a checkpoint; read with
``weights_only=True``. Removed once the run's ``result.json`` is written.

Training writes through a ``Writer``, behind the training: it copies the state to the host and returns, and a
thread pickles, writes and fsyncs it while the next epoch trains. Written at once, the four checkpoints of a group
at Zoology's figure-2 cell held the training up 0.14 s an epoch on an H100 machine (the epoch itself: 1.71 s).
"""
from __future__ import annotations

import logging
import os
import threading
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


def to_host(state):
    """A copy of ``state`` (dicts, lists and tuples of tensors and plain values) that shares nothing the training
    changes: every tensor copied to the host, every container new. GPU tensors go to page-locked memory, all
    copies queued at once and waited for once: copied one by one into pageable memory, the checkpoints of a group
    at MQAR N=512, d=512 took 0.18 to 0.20 s an epoch of device-to-host copies (H100 profiles)."""
    on_gpu = []

    def copy(value):
        if isinstance(value, torch.Tensor):
            value = value.detach()
            if not value.is_cuda:
                return value.clone()
            host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            on_gpu.append(value.device)
            return host.copy_(value, non_blocking=True)
        if isinstance(value, dict):
            return {key: copy(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(copy(item) for item in value)
        return value

    host_state = copy(state)
    for device in set(on_gpu):
        torch.cuda.synchronize(device)
    return host_state


class Writer:
    """Saves checkpoints on a thread: ``submit`` copies the states to the host and returns; ``wait`` returns once
    everything submitted is on disk, and raises the first error a write met (an unwritable folder, a full disk).
    A ``submit`` first waits for the one before it, so at most one round of states is in host memory."""

    def __init__(self):
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def submit(self, checkpoints: list[tuple[Path, dict]]) -> None:
        """Save each (run_dir, state) of ``checkpoints``, in order, behind the caller."""
        self.wait()
        copies = [(run_dir, to_host(state)) for run_dir, state in checkpoints]
        self._thread = threading.Thread(target=self._write, args=(copies,), name="zoo-checkpoints", daemon=True)
        self._thread.start()

    def _write(self, checkpoints: list[tuple[Path, dict]]) -> None:
        try:
            for run_dir, state in checkpoints:
                save(run_dir, state)
        except BaseException as err:  # noqa: BLE001 - handed to the training thread by ``wait``
            self._error = err

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


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
