"""The CUDA-graph training step computes the same updates as the eager step."""

import pytest
import torch

from group_batches import random_batches
from zoo.graphs import WARMUP_CALLS, GroupCall, static_copy
from zoo.model import LanguageModel
from zoo.step import Member, TrainStep


def _setup(graphs: bool, device, lrs=(1e-2,), dropout=0.0, bf16=False, grad_clip=1.0):
    members = []
    for lr in lrs:
        torch.manual_seed(0)
        model = LanguageModel(vocab_size=64, d_model=32, n_layers=2, mixer="softmax", max_seq_len=16,
                              dropout=dropout).to(device)
        lr = torch.tensor(lr, device=device) if graphs else lr
        opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=device.type == "cuda", capturable=graphs)
        members.append(Member(model, model, opt))
    return [m.model for m in members], TrainStep(members, bf16=bf16, grad_clip=grad_clip, graphs=graphs)


def _train(graphs, device, lrs=(1e-2,)):
    models, step = _setup(graphs, device, lrs)
    losses = [step(*b).tolist() for b in random_batches(device)]
    return models, losses, step


def test_eager_step_sums_losses_per_member():
    _, losses, step = _train(False, torch.device("cpu"), lrs=(1e-2, 1e-3))
    sums = step.take_epoch_loss_sums()
    assert torch.allclose(sums, torch.tensor(losses).sum(0), atol=1e-4)
    assert losses[0][0] == losses[0][1] and losses[-1][0] != losses[-1][1]  # same start, own lr
    assert step.take_epoch_loss_sums().tolist() == [0.0, 0.0]


def test_deactivated_member_stops_changing():
    models, step = _setup(False, torch.device("cpu"), lrs=(1e-2, 1e-2))
    batches = list(random_batches(torch.device("cpu"), n=4))
    step(*batches[0])
    step.deactivate(1)
    frozen = [p.clone() for p in models[1].parameters()]
    for b in batches[1:]:
        step(*b)
    assert all(torch.equal(a, b) for a, b in zip(frozen, models[1].parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters()))


@pytest.mark.gpu
def test_graph_replay_matches_eager():
    device = torch.device("cuda")
    lrs = (1e-2, 3e-3, 1e-3)  # a group: one graph, each member on its own stream
    eager, eager_losses, _ = _train(False, device, lrs)
    graphed, graphed_losses, step = _train(True, device, lrs)
    assert len(step.recorded) == 2  # one graph per batch shape, recorded after the warm-up steps
    assert torch.allclose(torch.tensor(eager_losses), torch.tensor(graphed_losses), rtol=1e-4, atol=1e-5)
    for m_eager, m_graphed in zip(eager, graphed):
        for (name, a), b in zip(m_eager.named_parameters(), m_graphed.parameters()):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name


@pytest.mark.gpu
def test_graphs_are_recorded_again_after_a_member_stops(capfd):
    """A member that stops (early stop, divergence) drops the group's graphs; the next graphs are recorded in a
    fresh memory pool (recording into the dropped graphs' pool failed with an allocator assert, and the failed
    capture then broke every later dropout). Dropout on, as in training; the survivors keep replaying graphs."""
    device = torch.device("cuda")
    models, step = _setup(True, device, lrs=(1e-2, 3e-3, 1e-3), dropout=0.1, bf16=True, grad_clip=None)
    batches = list(random_batches(device, n=12, shapes=((8, 16, 3),)))
    for b in batches[:6]:
        step(*b)
    assert len(step.recorded) == 1
    step.deactivate(0)
    frozen = [p.clone() for p in models[0].parameters()]
    losses = [step(*b) for b in batches[6:]]
    torch.cuda.synchronize()
    assert step.graphs and len(step.recorded) == 1  # recorded again for the two members left, not eager
    assert all(torch.isfinite(loss).all() for loss in losses)
    assert all(torch.equal(a, b) for a, b in zip(frozen, models[0].parameters()))
    assert "capture failed" not in capfd.readouterr().out


@pytest.mark.gpu
def test_recording_again_does_not_grow_reserved_memory():
    """A member that stops makes the group record again. Warm-ups and captures on a new stream each time reserved a
    step's memory anew (the allocator reuses a block only on its own stream), and the dropped graphs' pool stayed
    reserved: a worker that recorded a few times held tens of GiB it did not use, and its neighbours on the GPU ran
    out of memory. Now the streams are the TrainStep's own and a stop gives the dropped pool back."""
    device = torch.device("cuda")
    models, step = _setup(True, device, lrs=(1e-2, 5e-3, 3e-3, 1e-3), bf16=True)
    batch = next(random_batches(device, n=1, shapes=((512, 16, 3),)))
    for _ in range(5):
        step(*batch)
    torch.cuda.synchronize()
    side, first = step.side_stream, torch.cuda.memory_reserved(device)
    for member in range(3):  # three stops, three more rounds of warm-up steps and a capture
        step.deactivate(member)
        for _ in range(5):
            step(*batch)
    torch.cuda.synchronize()
    assert len(step.recorded) == 1 and step.side_stream is side
    assert torch.cuda.memory_reserved(device) <= first * 1.1, (first, torch.cuda.memory_reserved(device))


@pytest.mark.gpu
def test_group_recording_a_second_batch_shape_keeps_replaying(tmp_path):
    """results/graph_replay_crash.md: a group of two DeltaNets on Z60 (195 full batches and one of 80 per epoch,
    so a second graph is recorded in epoch 4, after the first was replayed) crashed in graph replay within 9
    epochs every time while torch.cuda.graph emptied the allocator's cache before each capture."""
    from zoo.config import make_run_config
    from zoo.run import train_group

    def cfg(lr):
        return make_run_config({
            "task": {"name": "word_problem", "params": {"group": "Z60"},
                     "train": [{"num_examples": 50000, "input_seq_len": 16}],
                     "test": [{"num_examples": 1000, "input_seq_len": 16}]},
            "model": {"mixer": "deltanet", "d_model": 128, "n_layers": 2, "state_mixer": "mlp"},
            "train": {"batch_size": 256, "max_epochs": 7, "lr": lr, "early_stop_accuracy": None,
                      "checkpoint": False, "progress_bar": False}})
    records = train_group([cfg(5e-4), cfg(2e-3)], [tmp_path / "a", tmp_path / "b"], quiet=True)
    assert [r["status"] for r in records] == ["completed", "completed"], [r.get("error") for r in records]
    assert [r["epochs"] for r in records] == [7, 7]


@pytest.mark.gpu
@pytest.mark.parametrize("mixer", ["softmax", "gatedfwa", "based"])
def test_training_with_graphs_follows_eager_training(mixer, tmp_path):
    """Whole runs (Lightning loop, lr schedule, validation) with and without CUDA graphs agree."""
    eager, graphed = _run_losses(mixer, tmp_path, compile=False, graphs=False), _run_losses(mixer, tmp_path, False, True)
    assert torch.allclose(torch.tensor(graphed), torch.tensor(eager), rtol=1e-2), (eager, graphed)


@pytest.mark.gpu
def test_compiled_graphed_training_follows_eager_training(tmp_path, capfd):
    """``train.compile`` (opt-in): a compiled forward replayed from CUDA graphs trains as eager training does
    (dropout off: compiled dropout draws other random numbers), and the compiled forward really ran, in the test
    passes' graphs too (8 test batches an epoch: 3 warm-up calls, then a capture of inputs as the loader gives
    them)."""
    eager = _run_losses("softmax", tmp_path, compile=False, graphs=False)
    compiled = _run_losses("softmax", tmp_path, compile=True, graphs=True)
    assert torch.allclose(torch.tensor(compiled), torch.tensor(eager), rtol=1e-2), (eager, compiled)
    out = capfd.readouterr()
    assert "torch.compile failed" not in out.out + out.err


def _run_losses(mixer: str, tmp_path, compile: bool, graphs: bool) -> list[float]:
    """Test losses per epoch of a small MQAR run (fp32, no dropout)."""
    from zoo.config import make_run_config
    from zoo.run import train

    cfg = make_run_config({
        "task": {"name": "mqar", "params": {"vocab_size": 128, "input_seq_len": 64, "num_kv_pairs": 4},
                 "train": [{"num_examples": 2000}], "test": [{"num_examples": 1000}]},
        "model": {"mixer": mixer, "d_model": 64, "dropout": 0.0, "embed_dropout": 0.0},
        "train": {"batch_size": 128, "max_epochs": 2, "lr": 3e-3, "precision": "fp32", "cuda_graphs": graphs,
                  "compile": compile, "early_stop_accuracy": None, "progress_bar": False}})
    record = train(cfg, tmp_path / f"{mixer}-{compile}-{graphs}", quiet=True)
    assert record["status"] == "completed", record.get("error")
    return [h["test/loss"] for h in record["history"]]


class _BreaksWhileCaptured(GroupCall):
    """Two members that add one to a tensor each call; member 1 raises during a graph capture (as a member running
    out of memory there does)."""

    doing = "adding"

    def __init__(self, device):
        super().__init__([torch.zeros(1, device=device), torch.zeros(1, device=device)], graphs=True)

    def member_call(self, i, inputs, positions, targets):
        if i == 1 and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("member 1 cannot be captured")
        self.members[i].add_(1)


@pytest.mark.gpu
def test_failed_capture_names_the_members_error(capfd):
    """A member's error inside a capture left the members' streams unjoined, and ending the capture then raised
    "capturing stream has unjoined work", which was reported instead of the member's error (an out-of-memory
    error of Mamba's group of 4 at N=512, d=512 read so). The member's error is reported; the group goes on eagerly."""
    device = torch.device("cuda")
    call = _BreaksWhileCaptured(device)
    batch = next(random_batches(device, n=1))
    for _ in range(WARMUP_CALLS + 2):
        call.run(*batch)
    torch.cuda.synchronize()
    out = capfd.readouterr().out
    assert "capture failed, adding eagerly (member 1 cannot be captured)" in out, out
    assert not call.graphs and [m.item() for m in call.members] == [WARMUP_CALLS + 2] * 2


def test_a_graph_s_input_buffers_keep_the_batch_s_strides():
    """The test loader's positions are row slices of a [:, :K] view: their buffer keeps strides (N, 1), so a compiled
    forward's stride guards pass inside the capture as in the warm-up calls (no compile there)."""
    positions = torch.arange(40).view(5, 8)[1:4, :3]
    copy = static_copy(positions)
    assert copy.stride() == positions.stride() == (8, 1) and torch.equal(copy, positions)
    assert copy.data_ptr() != positions.data_ptr()
