"""The test metrics of zoo.lit: MAD's macro-averaged accuracy against torchmetrics, which MAD itself uses."""
import pytest
import torch
from torchmetrics.classification import MulticlassAccuracy

from zoo.config import make_run_config
from zoo.evaluation import macro_accuracy
from zoo.run import train
from zoo.tasks.base import IGNORE_INDEX


@pytest.mark.parametrize("seed", range(4))
def test_macro_accuracy_is_torchmetrics_multiclass_accuracy(seed):
    """mad-lab's metrics.Accuracy: MulticlassAccuracy(num_classes=V, ignore_index=-100) on flattened argmaxes.
    Few classes and skewed predictions, so classes that are only predicted, only targets or absent all occur."""
    g = torch.Generator().manual_seed(seed)
    V = 12
    targets = torch.randint(0, 6, (16, 9), generator=g)
    predictions = torch.where(torch.rand(16, 9, generator=g) < 0.5, targets, torch.randint(3, 9, (16, 9), generator=g))
    targets[torch.rand(16, 9, generator=g) < 0.4] = IGNORE_INDEX
    expected = MulticlassAccuracy(num_classes=V, ignore_index=IGNORE_INDEX)(predictions.flatten(), targets.flatten())
    per_token = (predictions == targets)[targets != IGNORE_INDEX].float().mean()
    assert not torch.isclose(expected, per_token)  # the two metrics differ here, so the check below can fail
    assert macro_accuracy(predictions, targets, V).item() == pytest.approx(expected.item(), abs=1e-6)


def test_records_carry_the_final_macro_accuracy(tmp_path):
    cfg = make_run_config({
        "task": {"name": "in_context_recall", "params": {"vocab_size": 16, "input_seq_len": 32},
                 "train": [{"num_examples": 64}], "test": [{"num_examples": 32}]},
        "model": {"mixer": "softmax", "d_model": 16, "n_layers": 1},
        "train": {"batch_size": 16, "max_epochs": 2, "progress_bar": False},
    })
    record = train(cfg, tmp_path)
    assert record["status"] == "completed", record["error"]
    assert [h["test/macro_acc"] for h in record["history"]][-1] == record["final_macro_accuracy"]
    assert 0.0 <= record["final_macro_accuracy"] <= 1.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_macro_accuracy_does_not_wait_for_the_gpu():
    """Every validation batch computes it for every member: a host sync there stalls the launch queue each time
    (a boolean index did, until 2026-11-27)."""
    g = torch.Generator().manual_seed(0)
    targets = torch.randint(0, 6, (16, 9), generator=g).cuda()
    predictions = torch.randint(0, 6, (16, 9), generator=g).cuda()
    torch.cuda.set_sync_debug_mode("error")
    try:
        value = macro_accuracy(predictions, targets, 12)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    want = MulticlassAccuracy(num_classes=12, ignore_index=IGNORE_INDEX)(predictions.cpu().flatten(),
                                                                           targets.cpu().flatten())
    assert value.item() == pytest.approx(want.item(), abs=1e-6)
