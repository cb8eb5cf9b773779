"""The local backend: persistent worker processes (``python -m zoo.worker``) on every GPU of this machine,
several per GPU, or on the CPU, each taking the next group of runs from the queue.

Python, CUDA and Triton start once per worker, not once per run, and the workers start (``start``) before the
sweep's runs are checked, so their imports overlap that check instead of following it. Workers die with the sweep
process (PR_SET_PDEATHSIG), so a killed sweep leaves no orphan writing into its folder; a worker that crashes or
passes its group's time limit is replaced, its group is recorded as failed or timed out, and the others go on.
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from zoo.backends import MAX_RUNS_PER_GPU, Options, crash_record
from zoo.devices import gpu_slots
from zoo.results import prepare_run_dir

GIB = 1 << 30
MEMORY_PER_RUN = 10 * GIB  # the default share of GPU memory one run is given
# Measured on an H100 at the figure-2 cell: with CUDA graphs one run keeps the GPU about 90% busy within an
# epoch (zoo.bench.profile), and 6 single-run processes started together had 1.00x the throughput of one
# (zoo.bench --sections scaling): CUDA gives processes the GPU in turns. A second worker fills the gaps between
# epochs (validation, data, graph capture). With NVIDIA MPS running the same 6 processes had 1.58x, but a fault in
# one MPS client broke the others (README): zoo does not start MPS.
WORKERS_PER_GPU = 2
HANG_GRACE_S = 60.0  # a group with train.timeout that has no result this long after it is counted as hung
OOM_RETRIES = 2  # times a group that ran out of GPU memory beside other workers goes back into the queue
# Workers that share a GPU free and re-grow their caches group after group; with fixed-size segments the
# out-of-memory errors of an H100 sweep with 9 workers reported 13.8 GiB "reserved but unallocated" in the
# failing process. Expandable segments let the caching allocator grow and return memory without that
# fragmentation; a later call with them (3 workers, CUDA graphs on) trained 32 of 32 ablation runs (so they work
# with graphs; fewer workers too, so not a measure of the gain). A user's own
# PYTORCH_CUDA_ALLOC_CONF is kept as it is.
ALLOC_CONF = "expandable_segments:True"


def default_runs_per_gpu() -> int:
    """How many runs share a GPU when the sweep does not say: one per MEMORY_PER_RUN of its memory."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    return max(1, min(MAX_RUNS_PER_GPU, total // MEMORY_PER_RUN))


def default_workers_per_gpu() -> int:
    """Worker processes per GPU when the sweep does not say: one per MEMORY_PER_RUN of its memory, at most
    WORKERS_PER_GPU (see there)."""
    return min(WORKERS_PER_GPU, default_runs_per_gpu())


def _die_with_parent() -> None:  # runs in the child between fork and exec (Linux)
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


class Worker:
    """One persistent ``python -m zoo.worker`` process on one slot (a GPU as ``CUDA_VISIBLE_DEVICES`` names it, or ""
    for the CPU)."""

    def __init__(self, slot: str, threads: int, log: Path):
        self.slot, self.log = slot, log
        read_fd, write_fd = os.pipe()
        env = {"PYTORCH_CUDA_ALLOC_CONF": ALLOC_CONF, **os.environ, "CUDA_VISIBLE_DEVICES": slot,
               "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log_file = open(log, "a")
        self.proc = subprocess.Popen([sys.executable, "-m", "zoo.worker", str(write_fd)], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     pass_fds=(write_fd,), preexec_fn=_die_with_parent)
        os.close(write_fd)
        self.replies = read_fd
        self.unread = b""  # the start of a reply line not yet complete
        self.group: list | None = None
        self.done: set[int] = set()  # members of the group whose final record came before the group's
        self.started = 0.0

    def start(self, group: list, run_dirs: list[Path]) -> None:
        self.group, self.done, self.started = group, set(), time.time()
        try:
            self.proc.stdin.write(json.dumps([str(d) for d in run_dirs]) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # the worker died: the loop records its group as failed
            pass

    def read_replies(self) -> list:
        """The reply lines complete so far, parsed (call when ``replies`` is readable). Read unbuffered: a worker
        may write several lines at once, and a buffered reader would keep the later ones where ``select`` does
        not see them. A torn line (the worker died mid-write) stays unread; the death is noticed by ``poll``."""
        data = os.read(self.replies, 1 << 20)
        lines = (self.unread + data).split(b"\n")
        self.unread = lines.pop()
        return [json.loads(line) for line in lines if line.strip()]

    def time_limit(self) -> float | None:
        """Seconds after which the group counts as hung: its longest train.timeout plus HANG_GRACE_S."""
        limits = [r.cfg.train.get("timeout") for r in self.group or []]
        return None if any(x is None for x in limits) or not limits else max(limits) + HANG_GRACE_S

    def stop(self) -> None:
        if self.log_file.closed:  # stopped already
            return
        self.proc.kill()
        self.proc.wait()
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        os.close(self.replies)
        self.log_file.close()


def out_of_memory(records: list[dict]) -> bool:
    """Whether a group failed for want of GPU memory: every run failed, at least one with CUDA or cuBLAS
    out of memory (the others of a group stop with it)."""
    errors = [r.get("error") or "" for r in records if r["status"] == "failed"]
    return len(errors) == len(records) and any("CUDA out of memory" in e or "CUBLAS_STATUS_ALLOC_FAILED" in e
                                               for e in errors)


def _died(worker: Worker, returncode: int) -> str:
    """The error of a group whose worker died: the exit code, then the end of the worker's log, or for a crash in
    native code the Python stacks faulthandler wrote (without its list of loaded extension modules)."""
    log = worker.log.read_text(errors="replace") if worker.log.exists() else ""
    crash = log.rfind("Fatal Python error")
    if crash >= 0:
        log = log[crash:].split("\nExtension modules:")[0]
    return f"worker exited with code {returncode}\n{log[-6000:]}"


class Pool:
    """The sweep's workers: ``per GPU x GPUs`` of them (``options.runs_per_gpu``, else
    :func:`default_workers_per_gpu`), or ``options.cpu_workers`` on a machine without GPU, each started at once.
    ``train`` replaces the ones that die in ``workers``; leaving the ``with`` block stops every one."""

    def __init__(self, out: Path, options: Options):
        import torch

        n_gpus = torch.cuda.device_count()
        if n_gpus:
            per_gpu = options.runs_per_gpu or default_workers_per_gpu()
            self.slots = [gpu for _ in range(per_gpu) for gpu in gpu_slots(n_gpus)]
        else:
            self.slots = [""] * max(1, options.cpu_workers)
        self.threads = max(1, (os.cpu_count() or 1) // len(self.slots))
        self.workers: list[Worker] = []
        try:
            for i, slot in enumerate(self.slots):
                self.workers.append(Worker(slot, self.threads, out / "workers" / f"{i}.log"))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for w in self.workers:
            w.stop()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def start(out: Path, options: Options) -> Pool:
    """Start the workers now, so their imports (PyTorch, Lightning) and CUDA start overlap the sweep process's
    check of its runs; they wait for their first group."""
    return Pool(out, options)


def train(groups: list[list], out: Path, options: Options, finish, running, started: Pool) -> None:
    """Train ``groups`` on the workers of ``started`` (see ``zoo.backends``). On Ctrl-C or any error the workers
    are stopped by ``started``'s exit in the caller; their runs stay unfinished."""
    slots, threads, workers = started.slots, started.threads, started.workers
    queue = list(groups)
    idle_deaths = 0
    oom_retries: dict[tuple, int] = {}  # the run ids of a group -> times requeued

    def settle(worker: Worker, records: list[dict] | None, error: str = "") -> None:
        """Hand on the worker's group: the records it returned, or one crash/timeout record per run. A group
        that ran out of GPU memory while other workers shared its GPU is tried again later instead (from its
        checkpoints), up to OOM_RETRIES times: the memory was most likely taken by the others."""
        left = [i for i in range(len(worker.group)) if i not in worker.done]  # members without a final record yet
        group = [worker.group[i] for i in left]
        records = [records[i] for i in left] if records else None
        key = tuple(run.id for run in group)
        tries = oom_retries.get(key, 0)
        shared_gpu = worker.slot != "" and slots.count(worker.slot) > 1
        if records and shared_gpu and tries < OOM_RETRIES and out_of_memory(records):
            oom_retries[key] = tries + 1
            print(f"zoo: {', '.join(key)} ran out of GPU memory beside other runs; "
                  f"queued again (try {tries + 2} of {OOM_RETRIES + 1})", flush=True)
            queue.append(group)
            worker.group = None
            return
        for run, record in zip(group, records or [crash_record(run, error) for run in group]):
            finish(run, record)
        worker.group = None

    while queue or any(w.group for w in workers):
        for i, w in enumerate(workers):
            if w.proc.poll() is not None:
                w.stop()
                if w.group:
                    settle(w, None, _died(w, w.proc.returncode))
                else:  # died with nothing to do: it cannot start (a broken install); do not respawn forever
                    idle_deaths += 1
                    if idle_deaths > 3:
                        tail = w.log.read_text(errors="replace")[-2000:] if w.log.exists() else ""
                        raise RuntimeError(f"sweep workers exit before training anything:\n{tail}")
                workers[i] = w = Worker(w.slot, threads, w.log)
            elif w.group and w.time_limit() and time.time() - w.started > w.time_limit():
                limit = w.time_limit()
                w.stop()
                for run in w.group:
                    record = crash_record(run, f"no result {limit:.0f} s after the start (train.timeout plus "
                                               "HANG_GRACE_S): the worker was stopped")
                    finish(run, {**record, "status": "timeout"})
                w.group = None
                workers[i] = w = Worker(w.slot, threads, w.log)
            if w.group is None and queue:
                group = queue.pop(0)
                w.start(group, [prepare_run_dir(out, run) for run in group])
        running(sum(len(w.group or []) for w in workers))
        busy = [w for w in workers if w.group]
        ready, _, _ = select.select([w.replies for w in busy], [], [], 0.2)
        for w in busy:
            if w.replies not in ready:
                continue
            for reply in w.read_replies():  # nothing at end of file: the worker died; the next pass records it
                if isinstance(reply, dict):  # one member stopped early: its result is final now
                    w.done.add(reply["member"])
                    finish(w.group[reply["member"]], reply["record"])
                else:
                    settle(w, reply)
