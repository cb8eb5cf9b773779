"""Run groups: the runs of one cell that differ only in lr train side by side, each exactly as alone."""
import gc

import pytest
import torch

from zoo.config import make_run_config
from zoo.lit import MixerLM
from zoo.model import LanguageModel
from zoo.run import forget_compiled_code, keeping_compiled_code, train, train_group

LRS = [1e-3, 3e-3, 1e-2, 1e30]  # the last one diverges in its first epoch


def _cfg(lr, early_stop=None):
    return make_run_config({
        "task": {"name": "mqar", "params": {"vocab_size": 64, "input_seq_len": 16, "num_kv_pairs": 2},
                 "train": [{"num_examples": 512}], "test": [{"num_examples": 128}]},
        "model": {"mixer": "softmax", "d_model": 16, "n_layers": 2},
        "train": {"batch_size": 64, "max_epochs": 3, "lr": lr, "early_stop_accuracy": early_stop,
                  "precision": "fp32", "progress_bar": False}})


def test_group_members_train_exactly_as_single_runs(tmp_path):
    cfgs = [_cfg(lr) for lr in LRS]
    grouped = train_group(cfgs, [tmp_path / f"g{i}" for i in range(len(cfgs))], quiet=True)
    for i, (cfg, member) in enumerate(zip(cfgs, grouped)):
        alone = train(cfg, tmp_path / f"s{i}", quiet=True)
        assert member["id"] == alone["id"] and member["status"] == alone["status"]
        assert member["epochs"] == alone["epochs"]
        for a, b in zip(member["history"], alone["history"]):
            for key in ("test/loss", "test/acc", "train/loss"):
                assert torch.isclose(torch.tensor(a[key]), torch.tensor(b[key]), rtol=1e-6, equal_nan=True), (i, key, a, b)
        assert (tmp_path / f"g{i}" / "metrics.csv").exists() == (member["epochs"] > 0)
    assert [m["status"] for m in grouped] == ["completed", "completed", "completed", "diverged"]
    assert grouped[-1]["epochs"] == 0 and grouped[0]["epochs"] == 3  # the NaN member touched no other


def test_member_that_reaches_the_target_stops_alone(tmp_path):
    """A member stops training at the first epoch it reaches the target; the others go on."""
    lrs = (3e-2, 1e-5)
    free = train_group([_cfg(lr) for lr in lrs], [tmp_path / "a", tmp_path / "b"], quiet=True)
    fast, slow = ([h["test/acc"] for h in r["history"]] for r in free)
    target = max(fast[:2])
    assert max(slow) < target, (fast, slow)  # the data makes the two members differ
    stopped = train_group([_cfg(lr, early_stop=target) for lr in lrs], [tmp_path / "c", tmp_path / "d"], quiet=True)
    assert stopped[0]["epochs"] == fast.index(target) + 1 < stopped[1]["epochs"] == 3
    assert stopped[0]["stop_reason"].startswith("reached accuracy")
    assert [h["test/acc"] for h in stopped[1]["history"]] == slow


def test_group_leaves_nothing_alive(tmp_path):
    """train_group hands its memory back before it returns: its models sit in reference cycles with Lightning's
    trainer, which only a collection frees (on a GPU, with the CUDA graphs' pools: a second large group in one
    process ran out of memory). Automatic collection is off here, so only train_group's own can free them."""
    gc.collect()
    gc.disable()
    try:
        train_group([_cfg(lr) for lr in LRS[:2]], [tmp_path / "a", tmp_path / "b"], quiet=True)
        alive = [o for o in gc.get_objects() if type(o) in (MixerLM, LanguageModel)]  # type(): no proxy lookups
    finally:
        gc.enable()
    assert alive == []


@pytest.fixture
def resets(monkeypatch):
    """The calls of ``torch._dynamo.reset``, recorded instead of made."""
    import torch._dynamo

    calls = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: calls.append(1))
    return calls


def test_compiled_code_is_forgotten_only_when_there_is_some(monkeypatch, resets):
    """A group forgets what torch.compile compiled for the groups before it (``forget_compiled_code``), but skips
    the reset while nothing was compiled: on CUDA it imports Inductor, seconds of a worker's first group."""
    from torch._dynamo import convert_frame

    monkeypatch.setattr(convert_frame, "FRAME_COUNTER", 0)
    forget_compiled_code()
    assert resets == []
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    forget_compiled_code()
    assert resets == [1]


def test_compiled_code_is_kept_within_keeping_compiled_code(monkeypatch, resets):
    """The profile's measured group keeps what its warm-up group compiled."""
    from torch._dynamo import convert_frame

    monkeypatch.setattr(convert_frame, "FRAME_COUNTER", 1)  # as after a compile
    with keeping_compiled_code():
        forget_compiled_code()
    assert resets == []
    forget_compiled_code()
    assert resets == [1]
