"""MAD's memorization: a fixed key-to-value map, the same in every example, learned across examples.

Vocabulary ``V``: keys ``[0, W//2)``, values ``[W//2, W)`` with ``W = V - 1``, insert token ``V-1``. The map
is a random one-to-one pairing of the first ``min(W//2, W - W//2)`` keys of a shuffled key list with a
shuffled value list, drawn once from ``map_seed`` on the CPU (so every split, device and seed shares it; MAD
fixes it by its config seed). An example of length ``N`` (``input_seq_len``, even) is ``N/2`` slots::

    input   k_1  insert  k_2  insert  ...
    label   -    m(k_1)  -    m(k_2)  ...

with keys uniform, independently, over the mapped keys; the label sits on the insert token, aligned with the
inputs as MAD's are.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from zoo.tasks.base import IGNORE_INDEX, Task, check_int, make_generator
from zoo.tasks.registry import register_task
from zoo.errors import ConfigError


@functools.lru_cache(maxsize=None)
def memorization_map(vocab_size: int, map_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(keys, values)``: two ``(M,)`` int64 CPU tensors, ``keys[i]`` maps to ``values[i]``."""
    generator = torch.Generator().manual_seed(map_seed)
    width = vocab_size - 1
    keys = torch.randperm(width // 2, generator=generator)
    values = width // 2 + torch.randperm(width - width // 2, generator=generator)
    size = min(len(keys), len(values))
    return keys[:size], values[:size]


@register_task("memorization")
@dataclass(kw_only=True)
class Memorization(Task):
    """MAD's memorization; see the module docstring."""

    vocab_size: int = 256
    input_seq_len: int = 32
    map_seed: int = 12345

    def __post_init__(self):
        check_int("vocab_size", self.vocab_size, 3)
        check_int("input_seq_len", self.input_seq_len, 2)
        if self.input_seq_len % 2:
            raise ConfigError("task.input_seq_len", self.input_seq_len, "an even integer >= 2")
        check_int("map_seed", self.map_seed, 0)

    @property
    def segment_name(self) -> str:
        return f"N{self.input_seq_len}_V{self.vocab_size}"

    @property
    def mapping(self) -> tuple[torch.Tensor, torch.Tensor]:
        return memorization_map(self.vocab_size, self.map_seed)

    @property
    def chance(self) -> float:
        """Keys are uniform and the map is one-to-one, so every value is equally likely."""
        return 1 / len(self.mapping[0])

    def generate(self, num_examples: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels, two ``(num_examples, input_seq_len)`` int64 tensors on ``device``."""
        generator = make_generator(seed, device)
        keys, values = (t.to(generator.device) for t in self.mapping)
        slots = self.input_seq_len // 2
        choice = torch.randint(0, len(keys), (num_examples, slots), generator=generator, device=generator.device)
        inputs = torch.stack((keys[choice], torch.full_like(choice, self.vocab_size - 1)), dim=2)
        labels = torch.stack((torch.full_like(choice, IGNORE_INDEX), values[choice]), dim=2)
        return inputs.reshape(num_examples, -1), labels.reshape(num_examples, -1)
