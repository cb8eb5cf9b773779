"""What a run needs from its task, worked out once: segment names, lengths and sizes, vocabulary, chance.

A run config names a task and the segments of its train and test splits (``zoo.config``). The model
and the training loop need facts that follow from them: the vocabulary and the longest input (they size
the embedding and the position tables), each segment's name and chance level (per-segment metrics),
and the number of batches per epoch (the learning-rate schedule). :func:`run_spec` builds each
segment's task once, as ``zoo.tasks.split`` plans a split (the same names, the same parameter and
``num_examples`` checks), and returns these facts as a frozen :class:`RunSpec` of plain values that is
passed down from there; nothing below rebuilds a task to ask again.
"""
from __future__ import annotations

import functools
import inspect
import json
from dataclasses import dataclass

from zoo.errors import ConfigError


@dataclass(frozen=True)
class SegmentSpec:
    """One segment of a split: its name (as ``zoo.tasks.split.build_split`` gives it), size and task facts."""

    name: str
    num_examples: int
    seq_len: int  # N, the input length
    vocab_size: int
    chance: float | None  # the best guess's accuracy without reading the tokens; None: the task does not say


@dataclass(frozen=True)
class RunSpec:
    """The resolved task facts of one run config (see the module docstring)."""

    train: tuple[SegmentSpec, ...]
    test: tuple[SegmentSpec, ...]

    @property
    def vocab_size(self) -> int:
        """The model vocabulary: the largest over every segment."""
        return max(s.vocab_size for s in self.train + self.test)

    @property
    def max_seq_len(self) -> int:
        """The longest input over every train and test segment (sizes position tables and filters)."""
        return max(s.seq_len for s in self.train + self.test)

    @property
    def train_seq_len(self) -> int:
        """The longest training input (results are filed under it; S5 tests at other lengths)."""
        return max(s.seq_len for s in self.train)

    @property
    def num_train_examples(self) -> int:
        return sum(s.num_examples for s in self.train)

    def steps_per_epoch(self, batch_size: int) -> int:
        """Training batches per epoch: each segment is cut into batches of its own (``zoo.data.DeviceBatches``)."""
        return sum(-(-s.num_examples // batch_size) for s in self.train)

    def test_chances(self) -> dict[str, float]:
        """``{test segment name: chance}``; ``{}`` if a segment's task does not state its chance."""
        if any(s.chance is None for s in self.test):
            return {}
        return {s.name: s.chance for s in self.test}


def run_spec(run: dict) -> RunSpec:
    """The :class:`RunSpec` of a resolved, plain run config (``zoo.config.resolve``); its task must be
    registered (``imports`` imported). Raises ``ConfigError`` for a bad segment. Cached by the task section,
    so the runs of a sweep that share a task build it once."""
    return _task_spec(json.dumps(run["task"], sort_keys=True, default=str))


@functools.lru_cache(maxsize=4096)
def _task_spec(task_json: str) -> RunSpec:
    task = json.loads(task_json)
    return RunSpec(*(_split(task, split) for split in ("train", "test")))


def _split(task: dict, split: str) -> tuple[SegmentSpec, ...]:
    # zoo.tasks.split plans a split exactly as build_split generates it (segment names, num_examples checked)
    from zoo.tasks import get_task
    from zoo.tasks.split import plan_split

    accepted = [p for p in inspect.signature(get_task(task["name"]).__init__).parameters if p != "self"]
    for i, segment in enumerate(task[split]):
        for name, value in {**task["params"], **segment}.items():
            if name != "num_examples" and name not in accepted:
                raise ConfigError(f"task.{split}[{i}].{name}", value, accepted)
    return tuple(SegmentSpec(name, n, built.seq_len, built.vocab_size, getattr(built, "chance", None))
                 for built, n, name in plan_split(task["name"], task["params"], task[split], split))


def build_model(model: dict, vocab_size: int, max_seq_len: int, device=None):
    """The model of a run config's ``model`` section, sized by the run's vocabulary and longest input
    (``RunSpec``): a ``LanguageModel`` (the section's keys but ``backbone`` are its constructor's), inside an
    ``AutoEncoder`` when ``backbone`` is "autoencoder". ``device="meta"`` builds it without memory."""
    import torch

    from zoo.autoencoder import AutoEncoder
    from zoo.model import LanguageModel

    model = dict(model)
    backbone = model.pop("backbone", "lm")
    with torch.device(device or "cpu"):
        lm = LanguageModel(vocab_size=vocab_size, max_seq_len=max_seq_len, **model)
        return AutoEncoder(lm) if backbone == "autoencoder" else lm
