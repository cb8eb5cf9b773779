"""A persistent training worker: ``python -m zoo.worker <reply fd>``, started by the local backend
(``zoo.backends.local``).

It reads groups of run folders from standard input, one JSON list per line; trains each group in this
process (``zoo.run.train_group``: runs that differ only in lr side by side, a single run being a group of
one) and writes to file descriptor ``<reply fd>``, one JSON value per line: ``{"member": i, "record": ...}``
as soon as member i of the group stops while others train on (so its result is kept even if the group is cut
short later), then the group's result records as one list.
It writes no result file: the sweep process does (``zoo.results.write_result``). Python, CUDA and Triton
start once per worker, not per run; Lightning's import and CUDA's start happen before the first group arrives
(``zoo.run.prepare_process``), while the sweep process checks its runs. ``train_group`` hands each group's GPU
memory back to the driver before it returns: workers share a GPU, and memory one group cached but no longer uses
must not run the next group of another worker out of memory.
"""
from __future__ import annotations

import faulthandler
import json
import os
import sys
from pathlib import Path

from omegaconf import OmegaConf


def main(reply_fd: int) -> int:
    faulthandler.enable()  # a crash in native code (SIGSEGV, SIGABRT) leaves every thread's Python stack in the log
    from zoo.config import make_run_config
    from zoo.run import prepare_process, train_group

    prepare_process()  # before the first group: the sweep process is still checking its runs

    with os.fdopen(reply_fd, "w", buffering=1) as reply:
        for line in sys.stdin:
            run_dirs = [Path(d) for d in json.loads(line)]
            print(f"zoo.worker: training {', '.join(d.name for d in run_dirs)}", flush=True)
            cfgs = [make_run_config(OmegaConf.load(d / "config.yaml")) for d in run_dirs]
            records = train_group(cfgs, run_dirs, quiet=True, on_member_done=lambda i, record: reply.write(
                json.dumps({"member": i, "record": record}, default=str) + "\n"))
            reply.write(json.dumps(records, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
