"""The CUDA-graph training step computes the same updates as the eager step."""
import copy

import pytest
import torch

from zoo.model import LanguageModel
from zoo.step import TrainStep


def _setup(graphs: bool, device):
    torch.manual_seed(0)
    model = LanguageModel(vocab_size=64, d_model=32, n_layers=2, mixer="softmax", max_seq_len=16).to(device)
    lr = torch.tensor(1e-2, device=device) if graphs else 1e-2
    opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=device.type == "cuda", capturable=graphs)
    return model, TrainStep(model, model, opt, bf16=False, grad_clip=1.0, graphs=graphs)


def _batches(device, n=12, shapes=((8, 16, 3), (5, 16, 3))):
    g = torch.Generator().manual_seed(1)
    for i in range(n):
        B, N, K = shapes[i % len(shapes)]
        x = torch.randint(0, 64, (B, N), generator=g)
        pos = torch.randint(0, N, (B, K), generator=g)
        y = torch.randint(0, 64, (B, K), generator=g)
        y[0, 0] = -100
        yield x.to(device), pos.to(device), y.to(device)


def _train(graphs, device):
    model, step = _setup(graphs, device)
    losses = [float(step(*b)) for b in _batches(device)]
    return model, losses, step


def test_eager_step_learns_and_sums_losses():
    model, losses, step = _train(False, torch.device("cpu"))
    assert abs(float(step.take_epoch_loss_sum()) - sum(losses)) < 1e-4
    assert float(step.take_epoch_loss_sum()) == 0.0


@pytest.mark.gpu
def test_graph_replay_matches_eager():
    device = torch.device("cuda")
    eager, eager_losses, _ = _train(False, device)
    graphed, graphed_losses, step = _train(True, device)
    assert len(step.recorded) == 2  # one graph per batch shape, recorded after the warm-up steps
    assert torch.allclose(torch.tensor(eager_losses), torch.tensor(graphed_losses), rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(eager.named_parameters(), graphed.parameters()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), name


@pytest.mark.gpu
@pytest.mark.parametrize("mixer", ["softmax", "gatedfwa", "based"])
def test_training_with_graphs_follows_eager_training(mixer, tmp_path):
    """Whole runs (Lightning loop, lr schedule, validation) with and without CUDA graphs agree."""
    from zoo.config import make_run_config
    from zoo.run import train

    def run(graphs: bool) -> list[float]:
        cfg = make_run_config({
            "task": {"name": "mqar", "params": {"vocab_size": 128, "input_seq_len": 64, "num_kv_pairs": 4},
                     "train": [{"num_examples": 2000}], "test": [{"num_examples": 200}]},
            "model": {"mixer": mixer, "d_model": 64},
            "train": {"batch_size": 128, "max_epochs": 3, "lr": 3e-3, "precision": "fp32", "cuda_graphs": graphs,
                      "early_stop_accuracy": None, "progress_bar": False}})
        record = train(cfg, tmp_path / str(graphs), quiet=True)
        assert record["status"] == "completed", record.get("error")
        return [h["val/loss"] for h in record["history"]]

    eager, graphed = run(False), run(True)
    assert torch.allclose(torch.tensor(graphed), torch.tensor(eager), rtol=1e-2), (eager, graphed)
