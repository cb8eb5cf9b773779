"""Word problems over S_n, A_n, Z_n and products, parity, modular addition: labels against a loop over
permutation tuples and residues (not the task's tables), group orders, chance levels, parameter checks."""
import itertools
import math

import pytest
import torch

from zoo.tasks import get_task
from zoo.tasks.groups import build_group, label_chance

WordProblem, Parity, ModularAddition, S5 = (get_task(n) for n in ("word_problem", "parity", "modular_addition", "s5"))


def reference_product(spec: str, names: list[str]) -> list[str]:
    """Running products ``x[t] o ... o x[0]`` of element names, one factor at a time, in plain Python."""
    kinds = [(part[0], int(part[1:])) for part in spec.split("x")]
    state = None
    out = []
    for name in names:
        letter = name.split(",")
        if state is None:
            state = letter
        else:
            new = []
            for (kind, n), a, s in zip(kinds, letter, state):
                if kind == "Z":
                    new.append(str((int(a) + int(s)) % n))
                else:
                    new.append("".join(a[int(c)] for c in s))  # (a o s)[i] = a[s[i]]
            state = new
        out.append(",".join(state))
    return out


@pytest.mark.parametrize("spec, order", [("S3", 6), ("A4", 12), ("Z7", 7), ("A5xZ5", 300), ("S3xZ2xZ2", 24),
                                         ("S4", 24), ("A5", 60)])
def test_labels_match_loop(spec, order):
    task = WordProblem(group=spec, input_seq_len=23)
    assert task.vocab_size == order == len(set(task.names))
    inputs, labels = task.generate(5, seed=1)
    assert inputs.shape == labels.shape == (5, 23) and inputs.dtype == torch.int64
    for xs, ys in zip(inputs.tolist(), labels.tolist()):
        assert task.describe_tokens(ys) == reference_product(spec, task.describe_tokens(xs))


def test_element_sets():
    s4 = build_group("S4").names
    assert s4[0] == "0123" and list(s4) == sorted(s4) and set(s4) == {"".join(map(str, p))
                                                                        for p in itertools.permutations(range(4))}
    inversions = lambda p: sum(p[i] > p[j] for i in range(len(p)) for j in range(i + 1, len(p)))
    a5 = build_group("A5").names
    assert len(a5) == 60 and all(inversions([int(c) for c in n]) % 2 == 0 for n in a5)
    product = build_group("A4xZ3")
    assert product.names[:4] == ("0123,0", "0123,1", "0123,2", "0231,0") and product.order == 36
    table = build_group("Z2xZ3").table  # Z2 x Z3 is cyclic of order 6: some element has order 6
    orders = []
    for g in range(6):
        power, k = g, 1
        while power != 0:
            power, k = int(table[g, power]), k + 1
        orders.append(k)
    assert max(orders) == 6 and math.lcm(*orders) == 6


def test_parity_and_modular_addition():
    inputs, labels = Parity(input_seq_len=30).generate(50, seed=3)
    assert set(inputs.unique().tolist()) == {0, 1}
    assert torch.equal(labels, inputs.cumsum(1) % 2)
    inputs, labels = ModularAddition(modulus=7, input_seq_len=30).generate(50, seed=3)
    assert inputs.max() == 6 and torch.equal(labels, inputs.cumsum(1) % 7)
    assert (Parity().vocab_size, ModularAddition(modulus=13).vocab_size) == (2, 13)


def test_chance():
    assert WordProblem(group="A5xZ5").chance == 1 / 300 and Parity().chance == 0.5
    assert ModularAddition(modulus=60).chance == 1 / 60
    for group in ("S5", "A5", "Z60"):
        task = S5(group=group, input_seq_len=10)
        assert task.chance == pytest.approx(1 / task.alphabet.numel())
    # transpositions: after one letter the best guess is any of 11 letters; later, the law spreads over S5
    task = S5(group="transpositions", input_seq_len=2, final_only=True)
    dist = {}
    letters = task.describe_tokens(task.alphabet.tolist())
    for a, b in itertools.product(letters, letters):
        product = "".join(b[int(c)] for c in a)
        dist[product] = dist.get(product, 0) + 1 / 121
    assert task.chance == pytest.approx(max(dist.values()))
    assert S5(group="transpositions", input_seq_len=1).chance == pytest.approx(1 / 11)
    long = S5(group="transpositions", input_seq_len=400, final_only=True).chance
    assert long == pytest.approx(1 / 120, rel=1e-6)
    table = build_group("Z2").table  # letters {1} only: labels alternate 1, 0, 1 ... and are always known
    assert label_chance(table, torch.tensor([1]), 5, final_only=False) == 1.0


def test_determinism_and_segment_name():
    task = WordProblem(group="S4", input_seq_len=40)
    assert torch.equal(task.generate(6, seed=2)[0], task.generate(6, seed=2)[0])
    assert not torch.equal(task.generate(6, seed=2)[0], task.generate(6, seed=3)[0])
    assert task.segment_name == "N40" and task.seq_len == 40


@pytest.mark.parametrize("cls, params, key, allowed", [
    (WordProblem, dict(group="S7"), "task.group", "order 5040"),
    (WordProblem, dict(group="Z1"), "task.group", "order 1"),
    (WordProblem, dict(group="Q8"), "task.group", "A5xZ5"),
    (WordProblem, dict(group="S5x"), "task.group", "A5xZ5"),
    (WordProblem, dict(group=5), "task.group", "A5xZ5"),
    (WordProblem, dict(input_seq_len=0), "task.input_seq_len", ">= 1"),
    (ModularAddition, dict(modulus=1), "task.modulus", "[2, 1024]"),
    (ModularAddition, dict(modulus=2.0), "task.modulus", "integer"),
    (Parity, dict(final_only=1), "task.final_only", "True"),
    (Parity, dict(group="Z2"), "task.group", "'input_seq_len'"),
])
def test_config_errors(cls, params, key, allowed, assert_config_error):
    assert_config_error(cls, params, key, allowed)
