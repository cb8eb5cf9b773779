"""S5 word problem: labels against a plain-Python composition, group variants, final_only, parameter checks."""
import itertools

import pytest
import torch

from zoo.tasks import get_task
from zoo.tasks.s5 import GROUPS, group_tables, prefix_compose

S5 = get_task("s5")


def parity(perm):
    """+1 for an even permutation, -1 for an odd one, from its cycle lengths."""
    seen, sign = set(), 1
    for start in range(len(perm)):
        length, i = 0, start
        while i not in seen:
            seen.add(i)
            i, length = perm[i], length + 1
        if length:
            sign *= (-1) ** (length - 1)
    return sign


def running_products(task, tokens):
    """Labels recomputed one token at a time from the tokens' names (tuples), not from the task's table."""
    if task.group == "Z60":
        return [str(sum(int(t) for t in task.describe_tokens(tokens[: i + 1])) % 60) for i in range(len(tokens))]
    state, out = tuple(range(5)), []
    for name in task.describe_tokens(tokens):
        perm = tuple(int(c) for c in name)
        state = tuple(perm[state[i]] for i in range(5))  # apply the earlier product first, then this token
        out.append("".join(map(str, state)))
    return out


@pytest.mark.parametrize("group", GROUPS)
def test_labels_match_sequential_composition(group):
    task = S5(group=group, input_seq_len=37)
    inputs, labels = task.generate(6, seed=2)
    assert inputs.shape == labels.shape == (6, 37) and inputs.dtype == labels.dtype == torch.int64
    assert inputs.max() < task.vocab_size and labels.min() >= 0 and labels.max() < task.vocab_size
    for example_inputs, example_labels in zip(inputs.tolist(), labels.tolist()):
        assert task.describe_tokens(example_labels) == running_products(task, example_inputs)


def test_permutation_names():
    names = S5().describe_tokens(range(120))
    assert names[0] == "01234" and names[-1] == "43210"
    assert sorted(names) == names and {tuple(map(int, n)) for n in names} == set(itertools.permutations(range(5)))


def test_alphabets():
    task = S5(group="A5")
    perms = [tuple(map(int, n)) for n in task.describe_tokens(group_tables("A5").alphabet.tolist())]
    assert len(perms) == 60 and all(parity(p) == 1 for p in perms)
    inputs, labels = task.generate(200, seed=0, device="cpu")
    assert all(parity(tuple(map(int, n))) == 1 for n in task.describe_tokens(labels.flatten().unique().tolist()))
    assert len(group_tables("S5").alphabet) == 120 and S5().vocab_size == 120 and task.vocab_size == 120

    task = S5(group="transpositions", input_seq_len=16)
    inputs, labels = task.generate(200, seed=0)
    moved = {sum(int(c) != i for i, c in enumerate(n)) for n in task.describe_tokens(inputs.unique().tolist())}
    assert len(inputs.unique()) == 11 and moved == {0, 2}
    label_parities = {parity(tuple(map(int, n))) for n in task.describe_tokens(labels.unique().tolist())}
    assert label_parities == {1, -1} and len(labels.unique()) > 60  # labels range over S5


def test_z60_is_commutative():
    task = S5(group="Z60", input_seq_len=12)
    table = group_tables("Z60").table
    assert task.vocab_size == 60 and torch.equal(table, table.T)
    inputs, labels = task.generate(20, seed=4)
    reversed_products = prefix_compose(inputs.flip(1), table)
    assert torch.equal(reversed_products[:, -1], labels[:, -1])
    s5_table = group_tables("S5").table
    assert not torch.equal(s5_table, s5_table.T)


@pytest.mark.parametrize("length", [1, 2, 5, 64, 100])
def test_prefix_compose_against_loop(length):
    table = group_tables("S5").table
    tokens = torch.randint(0, 120, (4, length), generator=torch.Generator().manual_seed(length))
    state, expected = tokens[:, 0], [tokens[:, 0]]
    for t in range(1, length):
        state = table[tokens[:, t], state]
        expected.append(state)
    assert torch.equal(prefix_compose(tokens, table), torch.stack(expected, dim=1))


def test_final_only():
    inputs, labels = S5(input_seq_len=20).generate(10, seed=9)
    final_inputs, final_labels = S5(input_seq_len=20, final_only=True).generate(10, seed=9)
    assert torch.equal(inputs, final_inputs) and torch.equal(final_labels[:, -1], labels[:, -1])
    assert (final_labels[:, :-1] == -100).all()


def test_seed_determinism_and_names():
    task = S5(input_seq_len=300)
    assert torch.equal(task.generate(8, seed=1)[0], task.generate(8, seed=1)[0])
    assert not torch.equal(task.generate(8, seed=1)[0], task.generate(8, seed=2)[0])
    assert (task.seq_len, task.segment_name) == (300, "N300")


@pytest.mark.parametrize("params, key, allowed", [
    (dict(group="S6"), "task.group", "'transpositions'"),
    (dict(input_seq_len=0), "task.input_seq_len", ">= 1"),
    (dict(final_only="no"), "task.final_only", "False"),
    (dict(num_kv_pairs=4), "task.num_kv_pairs", "'group'"),
])
def test_config_errors(params, key, allowed, assert_config_error):
    assert_config_error(S5, params, key, allowed)
