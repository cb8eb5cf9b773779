"""Finite groups for the word problems: S_n, A_n, Z_n and their direct products, as Cayley tables.

A group spec is a string of factors joined by ``x``: ``"S5"``, ``"A4"``, ``"Z60"``, ``"A5xZ5"``,
``"S3xZ2xZ2"``. Factors:

* ``S<n>``: the permutations of ``(0, ..., n-1)`` in one-line notation, numbered in lexicographic order
  (id 0 is the identity); ``(p o q)[i] = p[q[i]]`` (apply ``q`` first).
* ``A<n>``: the even permutations of ``S<n>``, numbered in the same (lexicographic) order.
* ``Z<n>``: the residues ``0..n-1`` under addition mod ``n``.

A direct product numbers ``(g_1, ..., g_k)`` as the mixed-radix number ``g_1 g_2 ... g_k`` (the last
factor varies fastest) and composes factor by factor. Element names are the factors' names joined by
``","`` (``"01234,3"``). The order must lie in ``[2, MAX_ORDER]``.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from dataclasses import dataclass

import torch

from zoo.errors import ConfigError

MAX_ORDER = 1024  # the table has MAX_ORDER**2 entries (8 MiB of int64)
_FACTOR = re.compile(r"([SAZ])([1-9][0-9]*)")
SPEC_HELP = f"S<n>, A<n>, Z<n> or a direct product such as A5xZ5, of order 2..{MAX_ORDER}"


@dataclass(frozen=True)
class Group:
    """``table[a, b] = a o b`` ``(G, G)`` int64 on the CPU, and a name per element id."""

    table: torch.Tensor
    names: tuple[str, ...]

    @property
    def order(self) -> int:
        return self.table.shape[0]


def _factor_order(kind: str, n: int) -> int:
    if kind == "Z":
        return n
    return math.factorial(n) // (2 if kind == "A" and n >= 2 else 1)


def _permutation_group(n: int, even_only: bool) -> Group:
    perms = [p for p in itertools.permutations(range(n))
             if not even_only or sum(p[i] > p[j] for i in range(n) for j in range(i + 1, n)) % 2 == 0]
    perm = torch.tensor(perms).view(len(perms), n)
    size = len(perms)
    composed = torch.gather(perm[:, None, :].expand(size, size, n), 2, perm[None, :, :].expand(size, size, n))
    # one-line notation read as a base-n number is increasing in lexicographic order, so rank by searchsorted
    weights = n ** torch.arange(n - 1, -1, -1)
    codes = (perm * weights).sum(-1)
    table = torch.searchsorted(codes, (composed * weights).sum(-1))
    return Group(table, tuple("".join(map(str, p)) for p in perms))


def _cyclic_group(n: int) -> Group:
    residues = torch.arange(n)
    return Group((residues[:, None] + residues[None, :]) % n, tuple(map(str, range(n))))


def direct_product(first: Group, second: Group) -> Group:
    """The direct product, numbered ``a * |second| + b`` for ``(a, b)``."""
    g1, g2 = first.order, second.order
    table = first.table[:, None, :, None] * g2 + second.table[None, :, None, :]
    names = tuple(f"{a},{b}" for a, b in itertools.product(first.names, second.names))
    return Group(table.reshape(g1 * g2, g1 * g2), names)


def parse_group(spec, key: str = "task.group") -> list[tuple[str, int]]:
    """The factors ``[(kind, n), ...]`` of ``spec``; ConfigError(``key``) unless it names a group of order
    ``2..MAX_ORDER``."""
    factors = [_FACTOR.fullmatch(part) for part in spec.split("x")] if isinstance(spec, str) else [None]
    if not all(factors):
        raise ConfigError(key, spec, SPEC_HELP)
    parsed = [(m.group(1), int(m.group(2))) for m in factors]
    order = math.prod(_factor_order(kind, n) for kind, n in parsed)
    if not 2 <= order <= MAX_ORDER:
        raise ConfigError(key, spec, f"{SPEC_HELP} (this one has order {order})")
    return parsed


@functools.lru_cache(maxsize=None)
def build_group(spec: str) -> Group:
    """The group named by ``spec`` (see the module docstring), on the CPU."""
    groups = [_cyclic_group(n) if kind == "Z" else _permutation_group(n, kind == "A") for kind, n in parse_group(spec)]
    return functools.reduce(direct_product, groups)


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


def label_chance(table: torch.Tensor, alphabet: torch.Tensor, length: int, final_only: bool) -> float:
    """The accuracy of the best guess that knows the position but not the tokens, averaged over the labelled
    positions, for running products of ``length`` letters drawn uniformly from ``alphabet``.

    The law of the product after ``t + 1`` letters is the law after ``t`` pushed through every letter; once it
    stops changing, every later position has the same best guess.
    """
    dist = torch.zeros(table.shape[0], dtype=torch.float64).index_add_(
        0, alphabet, torch.full((len(alphabet),), 1 / len(alphabet), dtype=torch.float64))
    moves = table[alphabet]  # (A, G): where each letter sends each state
    best = [float(dist.max())]
    while len(best) < length:
        new = torch.zeros_like(dist).index_add_(0, moves.flatten(), (dist / len(alphabet)).repeat(len(alphabet)))
        if torch.allclose(new, dist, rtol=0, atol=1e-15):
            best += [best[-1]] * (length - len(best))
            break
        dist = new
        best.append(float(dist.max()))
    return best[-1] if final_only else sum(best) / length
