"""Word problems (state tracking): read letters of a finite group, output the running product at every step.

An example of length ``N`` (``input_seq_len``) draws letters ``x[0..N-1]`` uniformly and independently from
an alphabet of group elements, and labels every position with the product so far::

    label[t] = x[t] o x[t-1] o ... o x[0]        (x[0] acts first)

so ``label[0] = x[0]`` and ``label[t] = x[t] o label[t-1]``. Inputs and labels share one vocabulary: the ids
of the group's elements (``zoo.tasks.groups``). With ``final_only`` only the last position is labelled (the
others -100). There is no maximum length, so test segments may be longer than training ones.

Tasks:

* ``word_problem``: any group of ``zoo.tasks.groups`` (``group: S5 | A4 | Z60 | A5xZ5 | ...``), letters from the
  whole group; vocabulary ``|G|``.
* ``parity``: letters are bits ``0``/``1``, the label is the parity of the bits so far (the word problem of
  ``Z2``).
* ``modular_addition``: letters ``0..m-1`` (``modulus``), the label is their sum mod ``m`` (``Z<m>``).
* ``s5`` (``tasks/s5.py``): ``S5`` with the alphabets ``S5``, ``A5``, ``transpositions``, and ``Z60``.

``chance`` is the accuracy of the best guess that knows the position but not the letters (``1/|G|`` when the
letters range over the whole group, as every label is then uniform); chance-corrected accuracy is
``(accuracy - chance) / (1 - chance)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.tasks.base import IGNORE_INDEX, Task, check_bool, check_int, make_generator
from zoo.tasks.groups import MAX_ORDER, build_group, label_chance, parse_group, prefix_compose
from zoo.tasks.registry import register_task
from zoo.errors import ConfigError


@dataclass(kw_only=True)
class RunningProduct(Task):
    """What every word problem shares; a subclass provides ``table``, ``alphabet`` and ``names``."""

    input_seq_len: int = 64
    final_only: bool = False

    def __post_init__(self):
        check_int("input_seq_len", self.input_seq_len, 1)
        check_bool("final_only", self.final_only)

    @property
    def table(self) -> torch.Tensor:
        """``(G, G)`` int64: ``table[a, b] = a o b`` over the vocabulary."""
        raise NotImplementedError

    @property
    def alphabet(self) -> torch.Tensor:
        """``(A,)`` int64: the ids the letters are drawn from, uniformly."""
        raise NotImplementedError

    @property
    def names(self) -> tuple[str, ...]:
        """A readable name per token id."""
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        return self.table.shape[0]

    @property
    def segment_name(self) -> str:
        return f"N{self.input_seq_len}"

    @property
    def chance(self) -> float:
        """Accuracy of the best position-aware, input-blind guess, over the labelled positions."""
        return label_chance(self.table, self.alphabet, self.input_seq_len, self.final_only)

    def describe_tokens(self, ids) -> list[str]:
        return [self.names[int(i)] for i in ids]

    def generate(self, num_examples: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels, two ``(num_examples, input_seq_len)`` int64 tensors on ``device``."""
        generator = make_generator(seed, device)
        alphabet = self.alphabet.to(generator.device)
        choice = torch.randint(0, len(alphabet), (num_examples, self.input_seq_len), generator=generator,
                               device=generator.device)
        inputs = alphabet[choice]
        labels = prefix_compose(inputs, self.table.to(generator.device))
        if self.final_only:
            labels[:, :-1] = IGNORE_INDEX
        return inputs, labels


@register_task("word_problem")
@dataclass(kw_only=True)
class WordProblem(RunningProduct):
    """The word problem of ``group`` (``zoo.tasks.groups``: ``S5``, ``A4``, ``Z60``, ``A5xZ5``...), letters from the
    whole group."""

    group: str = "S5"

    def __post_init__(self):
        super().__post_init__()
        parse_group(self.group)

    @property
    def table(self) -> torch.Tensor:
        return build_group(self.group).table

    @property
    def alphabet(self) -> torch.Tensor:
        return torch.arange(self.vocab_size)

    @property
    def names(self) -> tuple[str, ...]:
        return build_group(self.group).names

    @property
    def chance(self) -> float:
        return 1 / self.vocab_size  # uniform letters over the group make every label uniform


@register_task("modular_addition")
@dataclass(kw_only=True)
class ModularAddition(RunningProduct):
    """Running sums mod ``modulus`` of letters ``0..modulus-1``."""

    modulus: int = 10

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.modulus, bool) or not isinstance(self.modulus, int) or not 2 <= self.modulus <= MAX_ORDER:
            raise ConfigError("task.modulus", self.modulus, f"an integer in [2, {MAX_ORDER}]")

    @property
    def table(self) -> torch.Tensor:
        return build_group(f"Z{self.modulus}").table

    @property
    def alphabet(self) -> torch.Tensor:
        return torch.arange(self.modulus)

    @property
    def names(self) -> tuple[str, ...]:
        return build_group(f"Z{self.modulus}").names

    @property
    def chance(self) -> float:
        return 1 / self.modulus


@register_task("parity")
@dataclass(kw_only=True)
class Parity(RunningProduct):
    """Running parity of bits: ``label[t] = (x[0] + ... + x[t]) mod 2``."""

    @property
    def table(self) -> torch.Tensor:
        return build_group("Z2").table

    @property
    def alphabet(self) -> torch.Tensor:
        return torch.arange(2)

    @property
    def names(self) -> tuple[str, ...]:
        return ("0", "1")

    @property
    def chance(self) -> float:
        return 0.5
