"""Without a GPU, Triton kernels run on CPU through the interpreter.

The variable must be set before any module defines a ``@triton.jit`` kernel, and the mixers import
the kernels, so it is set here, in the root conftest that pytest loads before any test module.
"""
import faulthandler
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

# pytest-xdist workers share the machine's cores: each takes its share for PyTorch's CPU threads (the tests' CPU
# references), where every worker would otherwise start one thread per core (6 workers x 16 threads on a 16-core GPU
# machine, each worker also compiling Triton and Inductor kernels)
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


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


_fault_file = None


def pytest_runtest_logstart(nodeid, location):
    """With ZOO_FAULT_DIR=<folder>, each process writes the test it starts, and the Python stacks of a fatal signal
    (a crashed xdist worker shows no traceback of its own), to <folder>/<worker>.txt."""
    global _fault_file
    folder = os.environ.get("ZOO_FAULT_DIR")
    if not folder:
        return
    if _fault_file is None:
        os.makedirs(folder, exist_ok=True)
        _fault_file = open(os.path.join(folder, f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.txt"), "a")
        faulthandler.enable(file=_fault_file, all_threads=True)
    _fault_file.write(f"start {nodeid}\n")
    _fault_file.flush()
