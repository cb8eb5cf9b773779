"""A split (train, val or test) is a list of segments; each segment is one task configuration's examples.

Accuracy is reported per segment, so a test split with segments ``N256_kv16`` and ``N512_kv64`` shows how
recall degrades with length and number of pairs. Seeds are derived from ``(seed, split, segment index)``
by a hash into a range reserved for the split, so no train seed ever equals a val or test seed.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from zoo.tasks.registry import get_task
from zoo.errors import ConfigError

SPLITS = ("train", "val", "test")
_SEED_RANGE = 2**62  # split i draws its seeds from [i * 2**62, (i + 1) * 2**62)


@dataclass
class Segment:
    """One slice of a split: ``inputs`` and ``labels`` are ``(num_examples, N)`` int64, ``params`` the task's."""

    name: str
    inputs: torch.Tensor
    labels: torch.Tensor
    params: dict


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ConfigError("split", split, list(SPLITS))


def segment_seed(seed: int, split: str, index: int) -> int:
    """The generation seed of segment ``index`` of ``split``; the ranges of different splits are disjoint."""
    _check_split(split)
    digest = hashlib.sha256(f"{seed}/{split}/{index}".encode()).digest()
    return SPLITS.index(split) * _SEED_RANGE + int.from_bytes(digest[:8], "little") % _SEED_RANGE


def plan_split(task_name: str, common: dict, segments: list[dict], split: str) -> list[tuple[object, int, str]]:
    """``(task, num_examples, name)`` per segment, every segment checked; names as in :func:`build_split`."""
    _check_split(split)
    cls = get_task(task_name)
    planned, names = [], []
    for index, entry in enumerate(segments):
        params = {**common, **entry}
        num_examples = params.pop("num_examples", None)
        if isinstance(num_examples, bool) or not isinstance(num_examples, int) or num_examples < 1:
            raise ConfigError(f"task.{split}[{index}].num_examples", num_examples, "an integer >= 1")
        task = cls(**params)
        name = task.segment_name if task.segment_name not in names else f"{task.segment_name}_{index}"
        names.append(name)
        planned.append((task, num_examples, name))
    return planned


def build_split(task_name: str, common: dict, segments: list[dict], split: str, seed: int, device) -> list[Segment]:
    """Generate every segment of ``split`` on ``device``.

    Segment ``i`` is the task ``task_name`` built from ``{**common, **segments[i]}`` without the required key
    ``num_examples``, which sets how many examples it gets. Every segment's parameters are checked before
    any is generated. Names come from the task's ``segment_name`` (``"N256_kv16"``, ``"N64"``); a name
    already taken in this split gets the suffix ``"_<i>"``.
    """
    built: list[Segment] = []
    for index, (task, num_examples, name) in enumerate(plan_split(task_name, common, segments, split)):
        inputs, labels = task.generate(num_examples, segment_seed(seed, split, index), device)
        built.append(Segment(name, inputs, labels, task.params()))
    return built


def segment_chances(task_name: str, common: dict, segments: list[dict], split: str = "test") -> dict[str, float]:
    """``{segment name: chance}``, names as :func:`build_split` gives them, nothing generated.

    ``chance`` is each task's accuracy of the best guess that does not read the tokens (``1/|G|`` for a word
    problem over the whole group, ``1/2`` for parity); chance-corrected accuracy is
    ``(accuracy - chance) / (1 - chance)``. A user task without ``chance`` gives ``{}``.
    """
    planned = plan_split(task_name, common, segments, split)
    if not all(hasattr(task, "chance") for task, _, _ in planned):
        return {}
    return {name: task.chance for task, _, name in planned}
