"""Without a GPU, Triton kernels run on CPU through the interpreter.

The variable must be set before any module defines a ``@triton.jit`` kernel, and the mixers import
the kernels, so it is set here, in the root conftest that pytest loads before any test module.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


def pytest_collection_modifyitems(items):
    """Tests marked ``long`` go first, in their order: pytest-xdist hands tests out in collection order, so the
    longest start first and the short ones fill the workers' ends (the GPU suite's longest took 100 to 130 s, about
    a third of its wall time, and ran last when collected in file order)."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_runtest_logreport(report):
    """With ZOO_FAILURE_LOG=<file>, each failure's traceback is appended there as it happens (GPU runs that
    may be stopped at a time limit before pytest prints its summary)."""
    path = os.environ.get("ZOO_FAILURE_LOG")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext[-3000:]}\n")
