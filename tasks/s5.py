"""The S5 word problem: read a sequence of group elements, output their running product at every step.

Tokens. For ``S5``, ``A5`` and ``transpositions`` a token id is one of the 120 permutations of
``(0, 1, 2, 3, 4)``, numbered in lexicographic order of their one-line notation (id 0 is the identity
``01234``, id 1 is ``01243``, ..., id 119 is ``43210``); inputs and labels share this vocabulary of 120.
``Z60`` has its own vocabulary of 60: id ``r`` is the residue ``r`` of the cyclic group of order 60
(addition mod 60), named ``"r"``.

Composition order. A permutation ``p`` in one-line notation maps ``i -> p[i]``, and ``(p o q)[i] = p[q[i]]``
(apply ``q`` first). The label at position ``t`` (0-based) is the state after reading tokens ``0..t``::

    label[t] = x[t] o x[t-1] o ... o x[0]        (x[0] acts first)

so ``label[0] = x[0]`` and ``label[t] = x[t] o label[t-1]``. For ``Z60`` it is ``(x[0] + ... + x[t]) mod 60``.

Groups (``group``), inputs drawn uniformly from the listed alphabet:

* ``S5``: all 120 permutations; labels in S5.
* ``A5``: the 60 even permutations; labels stay in A5 (simple and non-abelian, so not solvable, like S5).
* ``Z60``: the 60 residues; a commutative control of the same order as A5.
* ``transpositions``: the identity and the 10 swaps ``(i j)``, 11 tokens; labels range over all of S5.

Loss is on every position, or only on the last one with ``final_only`` (other labels -100). Test lengths
may exceed training lengths: the task has no fixed maximum length.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import torch

from tasks.base import IGNORE_INDEX, Task, check_bool, check_int, make_generator
from tasks.registry import register_task
from zoo.errors import ConfigError

GROUPS = ("S5", "A5", "Z60", "transpositions")
PERMUTATIONS = list(itertools.permutations(range(5)))  # token id -> one-line notation


@dataclass(frozen=True)
class GroupTables:
    """One group variant: ``table[a, b] = a o b`` over the label vocabulary ``(G, G)``, the input alphabet
    (token ids, ``(A,)``), and a readable name for each token id."""

    table: torch.Tensor
    alphabet: torch.Tensor
    names: tuple[str, ...]


def _is_even(perm: tuple[int, ...]) -> bool:
    inversions = sum(perm[i] > perm[j] for i in range(5) for j in range(i + 1, 5))
    return inversions % 2 == 0


@functools.lru_cache(maxsize=None)
def group_tables(group: str) -> GroupTables:
    """The composition table, alphabet and names of ``group`` (one of :data:`GROUPS`), on the CPU."""
    if group == "Z60":
        residues = torch.arange(60)
        return GroupTables((residues[:, None] + residues[None, :]) % 60, residues, tuple(map(str, range(60))))
    perms = torch.tensor(PERMUTATIONS)  # (120, 5)
    index_of = {p: i for i, p in enumerate(PERMUTATIONS)}
    composed = torch.gather(perms[:, None, :].expand(120, 120, 5), 2, perms[None, :, :].expand(120, 120, 5))
    table = torch.tensor([[index_of[tuple(row)] for row in block] for block in composed.tolist()])
    moved = [sum(p[i] != i for i in range(5)) for p in PERMUTATIONS]
    alphabet = {
        "S5": range(120),
        "A5": [i for i, p in enumerate(PERMUTATIONS) if _is_even(p)],
        "transpositions": [i for i in range(120) if moved[i] in (0, 2)],
    }[group]
    return GroupTables(table, torch.tensor(list(alphabet)), tuple("".join(map(str, p)) for p in PERMUTATIONS))


def prefix_compose(tokens: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Running products: ``out[:, t] = tokens[:, t] o ... o tokens[:, 0]`` for ``tokens`` ``(B, L)`` int64.

    A Hillis-Steele scan: after the step with offset ``d``, ``x[t]`` is the product of the ``2d`` tokens
    ending at ``t``; ``ceil(log2 L)`` table lookups of the whole batch.
    """
    size = table.shape[0]
    flat = table.flatten()
    x, offset = tokens, 1
    while offset < tokens.shape[1]:
        index = x[:, offset:] * size
        index += x[:, :-offset]
        x = torch.cat((x[:, :offset], torch.take(flat, index)), dim=1)
        offset *= 2
    return x


@register_task("s5")
@dataclass(kw_only=True)
class S5WordProblem(Task):
    """The S5 word problem and its variants (see the module docstring for tokens and composition order)."""

    group: str = "S5"
    input_seq_len: int = 64
    final_only: bool = False

    def __post_init__(self):
        if self.group not in GROUPS:
            raise ConfigError("task.group", self.group, list(GROUPS))
        check_int("input_seq_len", self.input_seq_len, 1)
        check_bool("final_only", self.final_only)

    @property
    def tables(self) -> GroupTables:
        return group_tables(self.group)

    @property
    def vocab_size(self) -> int:
        return self.tables.table.shape[0]

    @property
    def seq_len(self) -> int:
        return self.input_seq_len

    @property
    def segment_name(self) -> str:
        return f"N{self.input_seq_len}"

    def describe_tokens(self, ids) -> list[str]:
        """Names of token ids: one-line notation of the permutation (e.g. ``"10234"``), or the residue for Z60."""
        return [self.tables.names[int(i)] for i in ids]

    def generate(self, num_examples: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels, two ``(num_examples, input_seq_len)`` int64 tensors on ``device``."""
        generator = make_generator(seed, device)
        tables = self.tables
        alphabet = tables.alphabet.to(generator.device)
        choice = torch.randint(0, len(alphabet), (num_examples, self.input_seq_len), generator=generator,
                               device=generator.device)
        inputs = alphabet[choice]
        labels = prefix_compose(inputs, tables.table.to(generator.device))
        if self.final_only:
            labels[:, :-1] = IGNORE_INDEX
        return inputs, labels
