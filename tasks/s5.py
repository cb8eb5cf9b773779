"""The S5 word problem and its variants: the running product of permutations of five points.

Tokens. For ``S5``, ``A5`` and ``transpositions`` a token id is one of the 120 permutations of
``(0, 1, 2, 3, 4)``, numbered in lexicographic order of their one-line notation (id 0 is the identity
``01234``, id 1 is ``01243``, ..., id 119 is ``43210``); inputs and labels share this vocabulary of 120.
``Z60`` has its own vocabulary of 60: id ``r`` is the residue ``r`` of the cyclic group of order 60
(addition mod 60), named ``"r"``. Composition order and labels are those of ``zoo.tasks.word_problem``::

    label[t] = x[t] o x[t-1] o ... o x[0]        (x[0] acts first)

Groups (``group``), inputs drawn uniformly from the listed alphabet:

* ``S5``: all 120 permutations; labels in S5.
* ``A5``: the 60 even permutations; labels stay in A5 (simple and non-abelian, so not solvable, like S5).
* ``Z60``: the 60 residues; a commutative control of the same order as A5.
* ``transpositions``: the identity and the 10 swaps ``(i j)``, 11 tokens; labels range over all of S5.

``word_problem`` (``tasks/word_problem.py``) covers any S_n, A_n, Z_n and direct product with a vocabulary of
the group's own elements; ``s5`` keeps A5 and the transpositions inside S5's vocabulary of 120.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from zoo.tasks.groups import build_group, prefix_compose
from zoo.tasks.registry import register_task
from zoo.tasks.word_problem import RunningProduct
from zoo.errors import ConfigError

__all__ = ["GROUPS", "GroupTables", "S5WordProblem", "group_tables", "prefix_compose"]

GROUPS = ("S5", "A5", "Z60", "transpositions")


@dataclass(frozen=True)
class GroupTables:
    """One group variant: ``table[a, b] = a o b`` over the label vocabulary ``(G, G)``, the input alphabet
    (token ids, ``(A,)``), and a readable name for each token id."""

    table: torch.Tensor
    alphabet: torch.Tensor
    names: tuple[str, ...]


@functools.lru_cache(maxsize=None)
def group_tables(group: str) -> GroupTables:
    """The composition table, alphabet and names of ``group`` (one of :data:`GROUPS`), on the CPU."""
    if group == "Z60":
        z60 = build_group("Z60")
        return GroupTables(z60.table, torch.arange(60), z60.names)
    s5 = build_group("S5")
    points = torch.tensor([[int(c) for c in name] for name in s5.names])  # (120, 5) one-line notation
    if group == "S5":
        alphabet = torch.arange(120)
    elif group == "A5":
        even = set(build_group("A5").names)
        alphabet = torch.tensor([i for i, name in enumerate(s5.names) if name in even])
    else:  # transpositions: the identity and the permutations that move exactly two points
        moved = (points != torch.arange(5)).sum(1)
        alphabet = ((moved == 0) | (moved == 2)).nonzero().flatten()
    return GroupTables(s5.table, alphabet, s5.names)


@register_task("s5")
@dataclass(kw_only=True)
class S5WordProblem(RunningProduct):
    """The S5 word problem and its variants (see the module docstring for tokens and composition order)."""

    group: str = "S5"

    def __post_init__(self):
        if self.group not in GROUPS:
            raise ConfigError("task.group", self.group, list(GROUPS))
        super().__post_init__()

    @property
    def tables(self) -> GroupTables:
        return group_tables(self.group)

    @property
    def table(self) -> torch.Tensor:
        return self.tables.table

    @property
    def alphabet(self) -> torch.Tensor:
        return self.tables.alphabet

    @property
    def names(self) -> tuple[str, ...]:
        return self.tables.names
