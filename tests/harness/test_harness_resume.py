"""Checkpoints: a run killed after an epoch resumes there and ends exactly as an uninterrupted run."""
import pytest
import torch

from zoo import checkpoint
from zoo.config import make_run_config
from zoo.lit import MixerLM
from zoo.run import train, train_group


def _cfg(lr=3e-3):
    return make_run_config({
        "task": {"name": "mqar", "params": {"vocab_size": 64, "input_seq_len": 16, "num_kv_pairs": 2},
                 "train": [{"num_examples": 256}, {"num_examples": 128, "input_seq_len": 32, "num_kv_pairs": 4}],
                 "test": [{"num_examples": 64}]},
        "model": {"mixer": "softmax", "d_model": 16, "n_layers": 2},  # dropout 0.1: the random stream matters
        "train": {"batch_size": 32, "max_epochs": 4, "lr": lr, "early_stop_accuracy": None, "precision": "fp32",
                  "progress_bar": False}})


class Killed(BaseException):
    """Stands for kill -9 after an epoch's checkpoint is on disk (not an Exception: nothing records it). Killed
    while the checkpoint was still being written, the run would resume from the epoch before."""


def _kill_after_epoch(monkeypatch, epoch):
    original = MixerLM.on_validation_epoch_end

    def end_then_die(self):
        original(self)
        if self.epoch == epoch:
            self.checkpoints.wait()
            raise Killed

    monkeypatch.setattr(MixerLM, "on_validation_epoch_end", end_then_die)


def _curve(record):
    return [(h["epoch"], h["test/loss"], h["test/acc"], h["train/loss"]) for h in record["history"]]


@pytest.mark.parametrize("lrs", [(3e-3,), (3e-3, 1e-2)])
def test_killed_run_resumes_and_matches_an_uninterrupted_run(tmp_path, monkeypatch, lrs):
    cfgs = [_cfg(lr) for lr in lrs]
    whole = train_group(cfgs, [tmp_path / f"whole{i}" for i in range(len(cfgs))], quiet=True)
    dirs = [tmp_path / f"cut{i}" for i in range(len(cfgs))]
    with monkeypatch.context() as m:
        _kill_after_epoch(m, 1)
        with pytest.raises(Killed):
            train_group(cfgs, dirs, quiet=True)
    cut = [checkpoint.load(d) for d in dirs]
    assert all(c["epoch"] == 1 and c["resumed_at"] == [] and c["train_seconds"] > 0 for c in cut)
    resumed = train_group(cfgs, dirs, quiet=True)
    for a, b, c, d in zip(whole, resumed, cut, dirs):
        assert b["status"] == "completed" and b["epochs"] == 4
        assert _curve(b) == _curve(a)
        assert a["resumed_at"] == [] and b["resumed_at"] == [2]
        assert b["train_seconds"] > c["train_seconds"]  # the killed attempt's training is counted too
        assert len((d / "metrics.csv").read_text().strip().splitlines()) == 1 + 4  # header + every epoch


def test_member_stopped_before_the_kill_keeps_its_seconds(tmp_path, monkeypatch):
    """A member that stopped before the run was killed trains no more after the resume: its record's training
    seconds are its checkpoint's; the member that went on counts both attempts."""
    cfgs = [_cfg(lr) for lr in (3e-3, 1e-2)]
    dirs = [tmp_path / f"m{i}" for i in range(2)]
    original = MixerLM.on_validation_epoch_end

    def stop_first_then_die(self):
        original(self)
        if self.epoch == 0:  # after epoch 0's test: its checkpoint is written with the outcome after epoch 1
            self._stop(0, "completed", "stopped by the test")
        if self.epoch == 1:
            self.checkpoints.wait()
            raise Killed

    with monkeypatch.context() as m:
        m.setattr(MixerLM, "on_validation_epoch_end", stop_first_then_die)
        with pytest.raises(Killed):
            train_group(cfgs, dirs, quiet=True)
    cut = [checkpoint.load(d) for d in dirs]
    assert cut[0]["outcome"] == ["completed", "stopped by the test"] and cut[1]["outcome"] is None
    stopped, went_on = train_group(cfgs, dirs, quiet=True)
    assert stopped["epochs"] == 1 and stopped["train_seconds"] == cut[0]["train_seconds"]
    assert went_on["epochs"] == 4 and went_on["train_seconds"] > cut[1]["train_seconds"]
    assert stopped["resumed_at"] == went_on["resumed_at"] == [2]


def test_checkpoint_is_not_written_when_off_and_a_damaged_one_is_ignored(tmp_path):
    cfg = _cfg()
    cfg.train.checkpoint = False
    train(cfg, tmp_path / "off", quiet=True)
    assert not (tmp_path / "off" / checkpoint.NAME).exists()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / checkpoint.NAME).write_bytes(b"not a checkpoint")
    assert checkpoint.load(tmp_path / "bad") is None
    record = train(_cfg(), tmp_path / "bad", quiet=True)
    assert record["epochs"] == 4 and torch.load(tmp_path / "bad" / checkpoint.NAME, weights_only=True)["epoch"] == 3


def test_checkpoint_from_before_the_test_metric_names_resumes(tmp_path):
    from zoo import checkpoint

    checkpoint.save(tmp_path, {"history": [{"epoch": 0, "val/acc": 0.5, "val/acc/N16": 0.4, "train/loss": 1.0}]})
    assert checkpoint.load(tmp_path)["history"] == [{"epoch": 0, "test/acc": 0.5, "test/acc/N16": 0.4,
                                                     "train/loss": 1.0}]


def test_writer_saves_the_state_as_it_was_when_submitted(tmp_path):
    """The training goes on changing its tensors, history and outcome while the thread writes: the checkpoint holds
    what was submitted, as ``save`` would have written it then."""
    weights, history = torch.zeros(3), [{"epoch": 0}]
    (tmp_path / "a").mkdir()
    writer = checkpoint.Writer()
    writer.submit([(tmp_path / "a", {"model": {"w": weights}, "history": history, "pair": (1, weights)})])
    weights.add_(1.0)
    history.append({"epoch": 1})
    writer.wait()
    state = checkpoint.load(tmp_path / "a")
    assert torch.equal(state["model"]["w"], torch.zeros(3)) and torch.equal(state["pair"][1], torch.zeros(3))
    assert state["history"] == [{"epoch": 0}] and state["pair"][0] == 1
    writer.submit([(tmp_path / "a", {"model": {"w": weights}, "history": history})])  # the next epoch's replaces it
    writer.wait()
    assert torch.equal(checkpoint.load(tmp_path / "a")["model"]["w"], torch.ones(3))
    assert [p.name for p in (tmp_path / "a").iterdir()] == [checkpoint.NAME]  # no temporary file left


def test_writer_hands_a_failed_write_to_the_training(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    writer = checkpoint.Writer()
    writer.submit([(tmp_path / "file", {"epoch": 0})])  # returns at once; the write fails on the thread
    with pytest.raises(OSError):
        writer.wait()
    writer.wait()  # raised once


@pytest.mark.gpu
def test_gpu_state_is_copied_to_the_host_before_the_training_goes_on():
    """GPU tensors go to page-locked host memory with queued copies: each copy holds the values of the moment, and
    the copies are complete when ``to_host`` returns."""
    weights = torch.randn(1000, 257, device="cuda")
    step = torch.tensor(3.0, device="cuda")
    state = {"model": {"w": weights, "t": weights.t()}, "optimizer": [(step, 1)], "rng": torch.arange(3)}
    copied = checkpoint.to_host(state)
    expected = weights.cpu()
    weights.mul_(2.0)
    step.add_(1.0)
    assert copied["model"]["w"].device.type == "cpu" and copied["model"]["w"].is_pinned()
    assert torch.equal(copied["model"]["w"], expected) and torch.equal(copied["model"]["t"], expected.t())
    assert copied["optimizer"][0][0].item() == 3.0 and copied["optimizer"][0][1] == 1
    assert torch.equal(copied["rng"], torch.arange(3))
