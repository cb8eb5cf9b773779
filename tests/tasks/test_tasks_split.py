"""build_split: segments, names, disjoint seeds per split, parameter checks before generation."""
import pytest
import torch

from zoo.tasks import build_split, get_task
from zoo.tasks.split import SPLITS, segment_chances, segment_seed
from zoo.errors import ConfigError

SEGMENTS = [
    {"input_seq_len": 64, "num_kv_pairs": 4, "num_examples": 20},
    {"input_seq_len": 128, "num_kv_pairs": 16, "num_examples": 10},
]


def test_segments_and_names():
    segments = build_split("mqar", {"vocab_size": 256}, SEGMENTS, "train", seed=0, device="cpu")
    assert [s.name for s in segments] == ["N64_kv4", "N128_kv16"]
    assert [s.inputs.shape for s in segments] == [(20, 64), (10, 128)]
    assert segments[1].params["vocab_size"] == 256 and segments[1].params["num_kv_pairs"] == 16
    assert "num_examples" not in segments[0].params
    s5 = build_split("s5", {"group": "A5"}, [{"input_seq_len": 8, "num_examples": 3}], "test", seed=0, device="cpu")
    assert s5[0].name == "N8" and s5[0].labels.shape == (3, 8)


def test_repeated_name_gets_suffix():
    segments = build_split("s5", {}, [{"num_examples": 2}, {"num_examples": 2, "group": "A5"}], "val", 0, "cpu")
    assert [s.name for s in segments] == ["N64", "N64_1"]


def test_train_and_test_seeds_never_overlap():
    seeds = {split: {segment_seed(seed, split, i) for seed in range(200) for i in range(5)} for split in SPLITS}
    assert all(len(s) == 1000 for s in seeds.values())
    assert max(seeds["train"]) < min(seeds["val"]) and max(seeds["val"]) < min(seeds["test"])
    assert max(seeds["test"]) < 2**64
    train = build_split("mqar", {}, SEGMENTS, "train", seed=0, device="cpu")
    again = build_split("mqar", {}, SEGMENTS, "train", seed=0, device="cpu")
    test = build_split("mqar", {}, SEGMENTS, "test", seed=0, device="cpu")
    assert torch.equal(train[0].inputs, again[0].inputs)
    assert not torch.equal(train[0].inputs, test[0].inputs)
    assert not torch.equal(train[0].inputs[:, :8], build_split("mqar", {}, SEGMENTS, "train", 1, "cpu")[0].inputs[:, :8])


def test_errors_come_before_any_generation(monkeypatch):
    calls = []
    monkeypatch.setattr(get_task("mqar"), "generate", lambda *args: calls.append(args))
    bad = SEGMENTS + [{"input_seq_len": 64, "num_kv_pairs": 17, "num_examples": 5}]
    with pytest.raises(ConfigError, match="task.num_kv_pairs=17"):
        build_split("mqar", {}, bad, "train", 0, "cpu")
    with pytest.raises(ConfigError) as caught:
        build_split("mqar", {}, [{"input_seq_len": 64}], "train", 0, "cpu")
    assert caught.value.key == "task.train[0].num_examples"
    with pytest.raises(ConfigError) as caught:
        build_split("mqar", {}, SEGMENTS, "dev", 0, "cpu")
    assert caught.value.key == "split" and "'train'" in str(caught.value)
    assert calls == []


def test_segment_chances_follow_segment_names():
    chances = segment_chances("s5", {"group": "A5"}, [{"num_examples": 2}, {"num_examples": 2, "group": "S5"},
                                                     {"num_examples": 2, "input_seq_len": 256}])
    assert chances == {"N64": pytest.approx(1 / 60), "N64_1": pytest.approx(1 / 120), "N256": pytest.approx(1 / 60)}
    assert segment_chances("mqar", {"vocab_size": 200}, SEGMENTS) == {"N64_kv4": 0.01, "N128_kv16": 0.01}
