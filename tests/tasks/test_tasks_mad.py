"""MAD's tasks: every example re-read token by token in plain Python against the definitions in the task
docstrings (not against the vectorised code), plus laws, determinism and parameter checks."""
import pytest
import torch

from zoo.tasks import get_task

ICR, NOISY, FUZZY, COPY, MEMO, COMPRESS = (get_task(n) for n in (
    "in_context_recall", "noisy_in_context_recall", "fuzzy_in_context_recall", "selective_copying",
    "memorization", "compression"))


def check_recall_example(task, xs, ys):
    width = task.vocab_size - task.noise_vocab_size
    keys_n = width // 2
    values, context_keys, noise_slots = {}, set(), 0
    slots = len(xs) // 2
    for s in range(slots):
        k, v = xs[2 * s], xs[2 * s + 1]
        if k >= width:  # a noise slot: two noise tokens, nothing labelled, never the probe
            assert s < slots - 1 and v >= width and ys[2 * s] == ys[2 * s + 1] == -100
            noise_slots += 1
            continue
        assert 0 <= k < keys_n <= v < width
        assert values.setdefault(k, v) == v  # one value per key within the example
        expected = v if k in context_keys or s == slots - 1 else -100
        assert ys[2 * s] == expected and ys[2 * s + 1] == -100
        if s < slots - 1:
            context_keys.add(k)
    assert xs[-2] in context_keys and noise_slots < slots - 1
    return noise_slots


@pytest.mark.parametrize("params", [dict(), dict(vocab_size=40, input_seq_len=64),
                                    dict(vocab_size=32, noise_vocab_size=16, frac_noise=0.5, input_seq_len=30)])
def test_in_context_recall_matches_definition(params):
    task = ICR(**params)
    inputs, labels = task.generate(200, seed=4)
    assert inputs.shape == labels.shape == (200, task.input_seq_len)
    noise = sum(check_recall_example(task, x, y) for x, y in zip(inputs.tolist(), labels.tolist()))
    slots = 200 * (task.input_seq_len // 2 - 1)
    # one context slot per example is never noise, every other one is with probability frac_noise
    expected = task.frac_noise * (slots - 200)
    assert abs(noise - expected) <= 5 * (expected * (1 - task.frac_noise)) ** 0.5 + 1e-9
    train_inputs, train_labels = ICR(**params, training=True).generate(200, seed=4)
    assert torch.equal(train_inputs, inputs)
    assert torch.equal(train_labels[:, :-1], inputs[:, 1:]) and (train_labels[:, -1] == -100).all()


def test_noisy_defaults_and_chance():
    task = NOISY()
    assert (task.vocab_size, task.noise_vocab_size, task.frac_noise) == (32, 16, 0.2) and task.chance == 1 / 8
    inputs, labels = task.generate(100, seed=0)
    for x, y in zip(inputs.tolist(), labels.tolist()):
        check_recall_example(task, x, y)
    assert inputs.max() >= 16 and ICR().chance == 1 / 8


def parse_fuzzy(task, xs_stream):
    """Split a stream (pads, then alternating key and value runs) into (key motif, value motif) pairs."""
    width = task.vocab_size - 1
    start = 0
    while xs_stream[start] == task.vocab_size - 1:
        start += 1
    runs, kind = [], None
    for token in xs_stream[start:]:
        assert token < width
        token_kind = token >= width // 2
        if token_kind != kind:
            runs.append([])
            kind = token_kind
        runs[-1].append(token)
    assert len(runs) % 2 == 0 and all(r[0] < width // 2 for r in runs[::2])
    return start, [(tuple(k), tuple(v)) for k, v in zip(runs[::2], runs[1::2])]


@pytest.mark.parametrize("params", [dict(), dict(input_seq_len=40), dict(vocab_size=12, key_motif_size=2,
                                                                        value_motif_size=1, input_seq_len=60),
                                    dict(input_seq_len=64, training=True)])
def test_fuzzy_recall_matches_definition(params):
    task = FUZZY(**params)
    k, v, length = task.key_motif_size, task.value_motif_size, task.input_seq_len
    inputs, labels = task.generate(100, seed=5)
    assert inputs.shape == labels.shape == (100, length)
    sizes = set()
    for xs, ys in zip(inputs.tolist(), labels.tolist()):
        if task.training:
            stream = xs + [ys[-1]]
            assert ys[:-1] == xs[1:]
        else:
            last_label = [y for y in ys if y != -100][-1]
            stream = xs + [last_label]
        pad, pairs = parse_fuzzy(task, stream)
        assert pad >= 2 and pairs[-1] in pairs[:-1]  # the probe pair is in the context
        probe_len = len(pairs[-1][0]) + len(pairs[-1][1])
        budget = length - probe_len - (k + v)
        context = sum(len(a) + len(b) for a, b in pairs[:-1])
        last = len(pairs[-2][0]) + len(pairs[-2][1])
        assert context - last < budget <= context  # pairs were appended while the context was short
        seen, expected, position = {}, [-100] * (length + 1), pad
        for index, (key, value) in enumerate(pairs):
            assert len(set(key)) == len(key) <= k and len(set(value)) == len(value) <= v
            sizes.add(len(key))
            assert seen.setdefault(key, value) == value
            if key in [p[0] for p in pairs[:index]]:
                for i, token in enumerate(value):
                    expected[position + len(key) + i - 1] = token
            position += len(key) + len(value)
        if not task.training:
            assert ys == expected[:length]
    assert sizes == (set(range(1, k + 1)) if task.training else {k})


def test_selective_copying_matches_definition():
    task = COPY(vocab_size=10, input_seq_len=40, num_tokens_to_copy=6)
    inputs, labels = task.generate(500, seed=1)
    first_gap_blanks = 0
    for xs, ys in zip(inputs.tolist(), labels.tolist()):
        copy_at = 40 - 6 - 1
        assert xs[copy_at] == 9 and xs[copy_at + 1:] == [8] * 6 and 9 not in xs[:copy_at]
        data = [x for x in xs[:copy_at] if x != 8]
        assert len(data) == 6 and xs[copy_at - 1] != 8 and ys[-6:] == data and ys[:-6] == [-100] * 34
        first_gap_blanks += xs[:copy_at].index(data[0])
    # each of the 40 - 13 = 27 blanks lands before the first data token with probability 1/6
    assert abs(first_gap_blanks / 500 - 27 / 6) < 0.3
    assert task.chance == 1 / 8


def test_memorization_map_is_fixed_across_examples_and_seeds():
    task = MEMO(vocab_size=20, input_seq_len=12)
    mapping = {}
    for seed in (0, 1):
        inputs, labels = task.generate(300, seed=seed)
        for xs, ys in zip(inputs.tolist(), labels.tolist()):
            assert xs[1::2] == [19] * 6 and ys[0::2] == [-100] * 6
            for key, value in zip(xs[0::2], ys[1::2]):
                assert 0 <= key < 9 and 9 <= value < 19 and mapping.setdefault(key, value) == value
    assert len(mapping) == 9 and len(set(mapping.values())) == 9 and task.chance == 1 / 9
    other = MEMO(vocab_size=20, input_seq_len=12, map_seed=1).mapping
    assert not torch.equal(other[1], task.mapping[1])


def test_compression():
    task = COMPRESS(vocab_size=6, input_seq_len=9)
    inputs, labels = task.generate(50, seed=2)
    assert torch.equal(inputs, labels) and (inputs[:, -1] == 5).all() and inputs[:, :-1].max() == 4
    assert task.backbone == "autoencoder" and task.chance == pytest.approx((8 / 5 + 1) / 9)


@pytest.mark.parametrize("cls", [ICR, NOISY, FUZZY, COPY, MEMO, COMPRESS])
def test_determinism_and_segment_names(cls):
    task = cls()
    a, b, c = task.generate(8, seed=3), task.generate(8, seed=3), task.generate(8, seed=4)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[0], c[0])
    assert task.segment_name.startswith(f"N{task.seq_len}_") and 0 < task.chance < 1
    assert a[0].max() < task.vocab_size and (a[1][a[1] != -100] < task.vocab_size).all()


@pytest.mark.parametrize("cls, params, key, allowed", [
    (ICR, dict(input_seq_len=127), "task.input_seq_len", "even"),
    (ICR, dict(input_seq_len=2), "task.input_seq_len", ">= 4"),
    (ICR, dict(frac_noise=1.0), "task.frac_noise", "[0, 1)"),
    (ICR, dict(frac_noise=0.2, noise_vocab_size=0), "task.noise_vocab_size", "frac_noise > 0"),
    (NOISY, dict(vocab_size=17), "task.vocab_size", ">= 18"),
    (FUZZY, dict(vocab_size=6), "task.vocab_size", ">= 7"),
    (FUZZY, dict(input_seq_len=12), "task.input_seq_len", ">= 13"),
    (FUZZY, dict(key_motif_size=0), "task.key_motif_size", ">= 1"),
    (COPY, dict(input_seq_len=33), "task.input_seq_len", "> 2 * num_tokens_to_copy + 1 = 33"),
    (COPY, dict(vocab_size=2), "task.vocab_size", ">= 3"),
    (MEMO, dict(input_seq_len=31), "task.input_seq_len", "even"),
    (MEMO, dict(map_seed=-1), "task.map_seed", ">= 0"),
    (COMPRESS, dict(input_seq_len=1), "task.input_seq_len", ">= 2"),
    (COMPRESS, dict(num_kv_pairs=3), "task.num_kv_pairs", "'vocab_size'"),
])
def test_config_errors(cls, params, key, allowed, assert_config_error):
    assert_config_error(cls, params, key, allowed)
