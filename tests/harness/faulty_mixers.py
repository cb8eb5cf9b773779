"""Mixers that misbehave on purpose, for the sweep's failure-isolation tests (loaded via `imports`).

Validation runs each mixer once on the meta device (zoo.config checks its output shape) in the sweep
process itself, so a mixer that kills or hangs its process does so only on real data, as a crashing
kernel would."""
import torch
from torch import nn

from zoo.mixers.registry import register_mixer


class _Linear(nn.Module):
    def __init__(self, d_model, layer_idx=0, max_seq_len=0):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)


@register_mixer("test_raises")
class Raises(_Linear):
    def forward(self, x):
        raise RuntimeError("this mixer always fails")


@register_mixer("test_nan")
class MakesNaN(_Linear):
    def forward(self, x):
        return self.proj(x) * float("nan")


@register_mixer("test_oom")
class RunsOutOfMemory(_Linear):
    def forward(self, x):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


@register_mixer("test_crash")
class KillsItsProcess(_Linear):
    def forward(self, x):
        import os

        if not x.is_meta:
            os._exit(17)
        return x  # a worker that dies without writing a result (segfault, OOM killer)


@register_mixer("test_segfault")
class CrashesInNativeCode(_Linear):
    def forward(self, x):
        if not x.is_meta:
            import ctypes

            ctypes.string_at(0)  # SIGSEGV, as a crashing kernel launcher or driver call would
        return x


@register_mixer("test_last_dim_1")
class LastDimOne(_Linear):
    def forward(self, x):  # (B, L, D) -> (B, L, 1): would broadcast in the residual add
        return self.proj(x)[..., :1]


@register_mixer("test_length_1")
class LengthOne(_Linear):
    def forward(self, x):  # (B, L, D) -> (B, 1, D): would broadcast in the residual add
        return self.proj(x)[:, -1:]


@register_mixer("test_hang")
class Hangs(_Linear):
    def forward(self, x):  # a mixer stuck forever (a deadlocked kernel, an endless loop)
        if not x.is_meta:
            import time

            while True:
                time.sleep(1)
        return x


@register_mixer("test_wait_for_file")
class WaitsWhileFileExists(_Linear):
    """Blocks while the file named by ZOO_TEST_WAIT_FILE exists, then trains like a linear layer: lets a test
    stop a sweep at a known point without racing the clock."""

    def forward(self, x):
        import os
        import time

        flag = os.environ.get("ZOO_TEST_WAIT_FILE")
        while not x.is_meta and flag and os.path.exists(flag):
            time.sleep(0.05)
        return self.proj(x)


@register_mixer("test_wait_after_first_epoch")
class WaitsAfterFirstEpoch(_Linear):
    """Trains like a linear layer for ZOO_TEST_WAIT_AFTER forward calls in its process (its first epoch), then blocks
    while the file named by ZOO_TEST_WAIT_FILE exists: a group is held in its second epoch, after a member stopped."""

    calls = 0

    def forward(self, x):
        import os
        import time

        if not x.is_meta:
            WaitsAfterFirstEpoch.calls += 1
            flag = os.environ.get("ZOO_TEST_WAIT_FILE")
            while WaitsAfterFirstEpoch.calls > int(os.environ["ZOO_TEST_WAIT_AFTER"]) and flag and os.path.exists(flag):
                time.sleep(0.05)
        return self.proj(x)


@register_mixer("test_oom_once")
class RunsOutOfMemoryOnce(_Linear):
    """Out of GPU memory on its first real call anywhere (it leaves the file ZOO_TEST_OOM_MARK behind), then trains
    like a linear layer: memory that other runs on the GPU had taken and gave back."""

    def forward(self, x):
        import os

        mark = os.environ["ZOO_TEST_OOM_MARK"]
        if not x.is_meta and not os.path.exists(mark):
            open(mark, "w").close()
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.proj(x)
