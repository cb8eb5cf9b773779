"""Which GPUs this process was given, as names a child process can be given in its ``CUDA_VISIBLE_DEVICES``."""
from __future__ import annotations

import os


def gpu_slots(n_gpus: int) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` value that puts a child process on each of the ``n_gpus`` GPUs this process sees:
    the entries of this process's own ``CUDA_VISIBLE_DEVICES`` when it is set (indices, UUIDs or MIG names), so a
    sweep started with ``CUDA_VISIBLE_DEVICES=2,3`` trains on GPUs 2 and 3, not 0 and 1; else the indices 0 to
    n_gpus - 1. CUDA counts only the entries up to the first invalid one, as many as ``torch.cuda.device_count()``
    says."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(g) for g in range(n_gpus)]
    return [entry.strip() for entry in visible.split(",")][:n_gpus]
