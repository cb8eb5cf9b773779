"""MQAR: layout invariants, the power law of the gaps, determinism and parameter checks."""
import pytest
import torch

from zoo.tasks import get_task
from zoo.tasks.base import make_generator
from zoo.tasks.mqar import sample_distinct

MQAR = get_task("mqar")


@pytest.mark.parametrize("random_non_queries", [False, True])
@pytest.mark.parametrize("num_passes", [1, 2])
def test_layout_invariants(random_non_queries, num_passes):
    task = MQAR(vocab_size=128, input_seq_len=64, num_kv_pairs=6, random_non_queries=random_non_queries,
                num_passes=num_passes)
    inputs, labels = task.generate(300, seed=3)
    n, k, vocab = 300, 6, 128
    assert inputs.shape == labels.shape == (n, 64) and inputs.dtype == labels.dtype == torch.int64
    keys, values, context = inputs[:, 0:2 * k:2], inputs[:, 1:2 * k:2], task.context_len
    assert context == 2 * k * num_passes
    assert ((keys >= 1) & (keys < vocab // 2)).all() and ((values >= vocab // 2) & (values < vocab)).all()
    assert (keys.sort(dim=1).values.diff(dim=1) > 0).all() and (values.sort(dim=1).values.diff(dim=1) > 0).all()
    assert torch.equal(inputs[:, :context], inputs[:, :2 * k].repeat(1, num_passes))
    labelled = labels != -100
    assert (labelled.sum(dim=1) == k).all()
    assert not labelled[:, :context].any()
    positions = labelled.nonzero()[:, 1].view(n, k)
    assert ((positions - context) % 2 == 0).all()
    queried = inputs.gather(1, positions)
    assert torch.equal(queried.sort(dim=1).values, keys.sort(dim=1).values)  # every key queried exactly once
    # the label at the query position is the value bound to the key read there (Zoology's alignment)
    match = queried[:, :, None] == keys[:, None, :]
    expected = values[:, None, :].expand(n, k, k)[match].view(n, k)
    assert torch.equal(labels.gather(1, positions), expected)
    filler = ~labelled
    filler[:, :context] = False
    if random_non_queries:
        assert inputs[filler].min() >= 0 and inputs[filler].max() < vocab and inputs[filler].float().std() > 10
    else:
        assert (inputs[filler] == 0).all()


@pytest.mark.parametrize("power_a", [0.01, 0.5, 1.0])
def test_first_gap_follows_power_law(power_a):
    n = 20000
    task = MQAR(vocab_size=128, input_seq_len=64, num_kv_pairs=4, power_a=power_a, random_non_queries=False)
    inputs, _ = task.generate(n, seed=11)
    context = task.context_len
    space = (64 - context) // 2
    # the first key's gap is the first draw, so its law is exactly p(g) ~ a * (g + 1) ** (a - 1)
    first_key = inputs[:, :1]
    gaps = ((inputs[:, context::2] == first_key).float().argmax(dim=1))
    observed = torch.bincount(gaps, minlength=space).double() / n
    weights = power_a * torch.arange(1, space + 1, dtype=torch.float64) ** (power_a - 1)
    expected = weights / weights.sum()
    sigma = (expected * (1 - expected) / n).sqrt()
    assert ((observed - expected).abs() <= 5 * sigma + 1e-3).all(), (observed, expected)


def test_sample_distinct_is_uniform_over_ordered_pairs():
    draws = sample_distinct(60000, 2, 0, 4, make_generator(5, "cpu"))
    assert (draws[:, 0] != draws[:, 1]).all()
    counts = torch.bincount(draws[:, 0] * 4 + draws[:, 1], minlength=16).double()
    frequencies = counts[[i * 4 + j for i in range(4) for j in range(4) if i != j]] / 60000
    assert counts.sum() == 60000 and ((frequencies - 1 / 12).abs() < 0.006).all(), frequencies


def test_seed_determinism():
    task = MQAR(vocab_size=512, input_seq_len=128, num_kv_pairs=8)
    first, second, other = task.generate(50, seed=7), task.generate(50, seed=7), task.generate(50, seed=8)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert not torch.equal(first[0], other[0])


def test_properties():
    task = MQAR(vocab_size=1000, input_seq_len=256, num_kv_pairs=16)
    assert (task.vocab_size, task.seq_len, task.segment_name) == (1000, 256, "N256_kv16")
    assert MQAR(input_seq_len=256, num_kv_pairs=16, num_passes=2).segment_name == "N256_kv16_p2"
    assert MQAR.param_names() == ["vocab_size", "input_seq_len", "num_kv_pairs", "power_a",
                                  "random_non_queries", "num_passes"]


@pytest.mark.parametrize("params, key, allowed", [
    (dict(input_seq_len=64, num_kv_pairs=17), "task.num_kv_pairs", "[1, 16]"),
    (dict(input_seq_len=64, num_kv_pairs=11, num_passes=2), "task.num_kv_pairs", "[1, 10]"),
    (dict(input_seq_len=64, vocab_size=64), "task.vocab_size", "> input_seq_len=64"),
    (dict(input_seq_len=63), "task.input_seq_len", "even"),
    (dict(power_a=0.0), "task.power_a", "> 0"),
    (dict(power_a=-1), "task.power_a", "> 0"),
    (dict(num_passes=0), "task.num_passes", ">= 1"),
    (dict(num_kv_pairs=2.5), "task.num_kv_pairs", "integer"),
    (dict(random_non_queries="yes"), "task.random_non_queries", "True"),
    (dict(foo=3), "task.foo", "'num_kv_pairs'"),
])
def test_config_errors(params, key, allowed, assert_config_error):
    assert_config_error(MQAR, params, key, allowed)
