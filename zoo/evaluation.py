"""The test metrics of a group's members on one batch, as sums that add up over the test split; on CUDA replayed
from one CUDA graph per batch shape (``zoo.graphs``).

Accuracy counts labelled positions only, argmax over the full vocabulary; sequence accuracy counts examples whose
labelled positions are all right. ``macro_accuracy`` is MAD's accuracy (mad-lab's ``metrics.Accuracy``:
torchmetrics' ``MulticlassAccuracy``, macro-averaged over the vocabulary, computed per test batch and averaged over
batches as Lightning logs it). Nothing here waits for the host: the sums stay on the device until the epoch's end.

Why graphs: a member's forward on a test batch is a few hundred small kernels, as in training. Run eagerly, the
test pass of a group of 4 at Zoology's figure-2 cell (3,000 examples, 12 batches) took 0.18 s an epoch on an H100,
against 1.71 s for the epoch's 391 training steps (``results/SPEED.md``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.graphs import GroupCall
from zoo.step import Member, autocast_bf16
from zoo.tasks.base import IGNORE_INDEX

# the columns of a batch's sums, per member
SUMS = ("loss", "correct tokens", "labelled tokens", "correct sequences", "sequences", "batch macro accuracy",
        "batches")


def macro_accuracy(predictions: torch.Tensor, targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Macro-averaged multiclass accuracy of one batch, as torchmetrics' ``MulticlassAccuracy(num_classes,
    ignore_index=-100)`` (its default ``average="macro"``) computes it: per class, true positives over
    targets of that class (recall); averaged over the classes that occur as a target or a prediction.

    predictions, targets: (B, K) int64, targets -100 where no label. Returns a 0-d float tensor, without
    a host sync (NaN if nothing is labelled).
    """
    labelled = targets != IGNORE_INDEX
    trash = torch.full_like(targets, num_classes)  # ignored positions count in an extra, dropped class
    target_class = torch.where(labelled, targets, trash)

    def count(index, weights):
        return torch.zeros(num_classes + 1, device=targets.device).scatter_add_(
            0, index.flatten(), weights.flatten().float())[:num_classes]

    ones = torch.ones_like(targets)
    support = count(target_class, ones)
    predicted = count(torch.where(labelled, predictions, trash), ones)
    hits = count(target_class, predictions == targets)  # unlabelled positions land in the dropped class
    present = (support + predicted) > 0
    return torch.where(present, hits / support.clamp(min=1), 0).sum() / present.sum()  # a boolean index would sync


def batch_sums(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The ``SUMS`` of one batch, (7,) float64, from float32 logits (B, K, V) at the labelled positions and targets
    (B, K) (-100 where no label)."""
    labelled = targets != IGNORE_INDEX
    predictions = logits.argmax(-1)
    right = (predictions == targets) & labelled
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
    return torch.stack([loss.double(), right.sum().double(), labelled.sum().double(),
                        (right == labelled).all(1).sum().double(),
                        torch.full((), len(targets), device=logits.device, dtype=torch.float64),
                        macro_accuracy(predictions, targets, logits.shape[-1]).double(),
                        torch.ones((), device=logits.device, dtype=torch.float64)])


class EvalPass(GroupCall):
    """Callable ``sums = test(inputs, positions, targets)``: (G, 7) float64 on the device, each active member's
    ``batch_sums`` and zeros for the inactive ones. The tensor is overwritten by the next call: add it up first.

    Args:
        members: the group (``zoo.step.Member``; their models in eval mode when called).
        bf16: autocast the forward pass to bfloat16.
        graphs: record and replay CUDA graphs (CUDA only). Recorded in the models' mode at the time, so only for
            calls in one mode (eval).
    """

    doing = "evaluating"

    def __init__(self, members: list[Member], bf16: bool, graphs: bool):
        super().__init__(members, graphs)
        self.bf16 = bf16
        self.sums = None

    def member_call(self, i: int, inputs, positions, targets) -> None:
        with autocast_bf16(inputs.device, self.bf16):
            logits = self.members[i].labelled_logits(inputs, positions).float()
        self.sums[i].copy_(batch_sums(logits, targets))

    def deactivate(self, index: int) -> None:
        super().deactivate(index)
        if self.sums is not None:
            self.sums[index].zero_()

    def __call__(self, inputs, positions, targets) -> torch.Tensor:
        if self.sums is None:
            with torch.inference_mode(False):  # Lightning tests in inference mode; ``deactivate`` may come outside it
                self.sums = torch.zeros(len(self.members), len(SUMS), device=inputs.device, dtype=torch.float64)
        self.run(inputs, positions, targets)
        return self.sums
