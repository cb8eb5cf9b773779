"""The LightningModule: next-token loss at labelled positions, accuracy per test segment, for a group
of models trained side by side (the runs of one cell that differ only in learning rate; see zoo.step).

A batch is (inputs (B, N), positions (B, K), targets (B, K), segment index); see ``zoo.data``.
Accuracy counts labelled positions only, argmax over the full vocabulary; sequence accuracy counts
examples whose labelled positions are all right. ``test/macro_acc`` is MAD's accuracy (mad-lab's
``metrics.Accuracy``: torchmetrics' ``MulticlassAccuracy``, macro-averaged over the vocabulary, computed
per test batch and averaged over batches as Lightning logs it; see :func:`macro_accuracy`). Metrics
accumulate on the device and are read once per validation epoch, so training steps never wait for the host.

Lightning's validation loop runs over the run's *test* split (``task.test``; no separate validation split
is generated), so its metrics are named for it: ``test/loss``, ``test/acc``, ``test/seq_acc`` and, with
several test segments, ``test/acc/<segment>``; the early stop (``train.early_stop_accuracy``) reads
``test/acc``.

Each member keeps its own history, early stop, divergence and time limit, exactly as if trained alone:
a member that stops is no longer trained or evaluated, and the fit ends when no member is left.
"""
from __future__ import annotations

import math
import time

import lightning as L
import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import nn

from zoo.tasks.base import IGNORE_INDEX
from zoo.step import Member, TrainStep, autocast_bf16, build_optimizer, lr_factor


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


class MixerLM(L.LightningModule):
    """Wraps G ``LanguageModel``s with the optimisers, schedules and metrics of their run configs.

    Optimisation is manual: each training step is one ``zoo.step.TrainStep`` call for the whole group
    (a CUDA-graph replay on GPU when ``train.cuda_graphs``), then one scheduler step per member. bf16
    autocast is ours too, so the Trainer runs at "32-true" precision and adds nothing per step.

    Args:
        cfgs: one run config per member, equal except for ``train.lr`` (and the run id).
        models: the members' models, built under each member's seed.
        on_epoch: ``on_epoch(i, metrics)`` after member ``i``'s validation (writes its logs).
        on_stop: ``on_stop(i)`` once member ``i`` has stopped (its outcome set, its last checkpoint written),
            while the others may go on training: its result can be kept at once.
        rng_states: each member's random state after its model was built (its own dropout stream).
        run_dirs: where each member's checkpoint is written after every epoch (``train.checkpoint``).
        resume: each member's checkpoint (``zoo.checkpoint``) to continue from, or None.
    """

    def __init__(self, cfgs: list[DictConfig], models: list[nn.Module], segment_names: list[str],
                 steps_per_epoch: int, bf16: bool, on_epoch=None, rng_states: list | None = None,
                 run_dirs: list | None = None, resume: list[dict] | None = None, on_stop=None):
        super().__init__()
        self.automatic_optimization = False
        self.cfgs, self.models, self.bf16 = cfgs, nn.ModuleList(models), bf16
        self.train_cfg = cfgs[0].train
        self.segment_names = segment_names
        self.steps_per_epoch = steps_per_epoch
        self.on_epoch, self.on_stop = on_epoch, on_stop
        self.rng_states = rng_states or [None] * len(models)
        self.step_fn: TrainStep | None = None
        self.histories: list[list[dict]] = [[] for _ in models]  # test metrics per epoch, per member
        self.outcomes: list[tuple[str, str] | None] = [None] * len(models)  # (status, reason) once stopped
        self.started = time.perf_counter()
        self.run_dirs, self.resume = run_dirs, resume
        self.epoch_offset = 0  # epochs finished before this fit (a resumed run)
        self.saved_stop = [False] * len(models)  # a stopped member's last checkpoint is written
        self.resumed_at: list[list[int]] = [[] for _ in models]  # the epochs each resume started from
        if resume:
            self.epoch_offset = 1 + max(c["epoch"] for c in resume)
            self.histories = [list(c["history"]) for c in resume]
            self.outcomes = [tuple(c["outcome"]) if c["outcome"] else None for c in resume]
            self.saved_stop = [c["outcome"] is not None for c in resume]
            self.rng_states = [c["rng"] for c in resume]
            self.resumed_at = [[*c.get("resumed_at", []), self.epoch_offset] for c in resume]

    def train_seconds(self, i: int) -> float:
        """Member ``i``'s training seconds so far, those before a resume included; a member that had stopped
        before the resume trained no more, so its seconds are its checkpoint's."""
        before = self.resume[i] if self.resume else {}
        earlier = before.get("train_seconds", 0.0)  # absent from checkpoints written before it was kept
        if before.get("outcome") is not None:
            return earlier
        return earlier + time.perf_counter() - self.started

    @property
    def epoch(self) -> int:
        """The run's epoch (counting the epochs before a resume)."""
        return self.current_epoch + self.epoch_offset

    def _stop(self, i: int, status: str, reason: str) -> None:
        self.outcomes[i] = (status, reason)
        self.step_fn.deactivate(i)
        if all(o is not None for o in self.outcomes):
            self.trainer.should_stop = True

    def training_step(self, batch, batch_idx):
        inputs, positions, targets, _ = batch
        self.step_fn(inputs, positions, targets)
        for i, scheduler in enumerate(self.schedulers_):
            if self.outcomes[i] is None:
                scheduler.step()

    def on_train_epoch_start(self) -> None:
        self.epoch_started = time.perf_counter()
        self.training_members = [o is None for o in self.outcomes]  # those that stop in this epoch go to on_stop

    def on_validation_epoch_start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # once per epoch, so the epoch's time is the GPU's time
        self.epoch_seconds = time.perf_counter() - self.epoch_started
        # Lightning validates before on_train_epoch_end, so the epoch's losses are read here
        self.train_loss = (self.step_fn.take_epoch_loss_sums() / self.steps_per_epoch).tolist()
        for i, loss in enumerate(self.train_loss):
            if self.outcomes[i] is None and not math.isfinite(loss):
                self._stop(i, "diverged", f"non-finite training loss in epoch {self.epoch}")
        # per member and segment: [loss sum, correct tokens, labelled tokens, correct sequences, sequences,
        # sum of batch macro accuracies, batches]
        self.test_sums = torch.zeros(len(self.models), len(self.segment_names), 7, device=self.device,
                                    dtype=torch.float64)

    def validation_step(self, batch, batch_idx):
        inputs, positions, targets, segment = batch
        labelled = targets != IGNORE_INDEX
        for i, member in enumerate(self.step_fn.members):
            if self.outcomes[i] is not None:
                continue
            with autocast_bf16(self.device, self.bf16):
                logits = member.labelled_logits(inputs, positions).float()
            predictions = logits.argmax(-1)
            right = (predictions == targets) & labelled
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
            row = torch.stack([loss.double(), right.sum().double(), labelled.sum().double(),
                               (right == labelled).all(1).sum().double(),
                               torch.full((), len(targets), device=self.device, dtype=torch.float64),
                               macro_accuracy(predictions, targets, logits.shape[-1]).double(),
                               torch.ones((), device=self.device, dtype=torch.float64)])
            self.test_sums[i, segment] += row

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        all_sums = self.test_sums.cpu()
        t = self.train_cfg
        for i, sums in enumerate(all_sums):
            if self.outcomes[i] is not None:  # stopped before this validation: not evaluated
                continue
            total = sums.sum(0)
            metrics = {"test/loss": total[0] / total[2], "test/acc": total[1] / total[2],
                       "test/seq_acc": total[3] / total[4], "test/macro_acc": total[5] / total[6]}
            if len(self.segment_names) > 1:
                for name, s in zip(self.segment_names, sums):
                    metrics[f"test/acc/{name}"] = s[1] / s[2]
            metrics = {k: float(v) for k, v in metrics.items()}
            entry = {"epoch": self.epoch, **metrics, "train_seconds": self.epoch_seconds,
                     "train/loss": self.train_loss[i]}
            self.histories[i].append(entry)
            if self.on_epoch is not None:
                self.on_epoch(i, entry)
            if not math.isfinite(metrics["test/loss"]):
                self._stop(i, "diverged", f"non-finite test loss in epoch {self.epoch}")
            elif t.early_stop_accuracy is not None and metrics["test/acc"] >= t.early_stop_accuracy:
                self._stop(i, "completed", f"reached accuracy {t.early_stop_accuracy}")
        if t.checkpoint and self.run_dirs is not None:
            self._save_checkpoints()
        if len(self.models) == 1 and self.histories[0]:
            self.log("test_acc", self.histories[0][-1]["test/acc"], prog_bar=True)  # for the progress bar
        timeout = t.get("timeout")
        if timeout is not None and time.perf_counter() - self.started > timeout:
            for i, outcome in enumerate(self.outcomes):
                if outcome is None:
                    self._stop(i, "timeout", f"train.timeout={timeout} s reached after epoch {self.epoch}")
        if self.on_stop is not None:
            for i, was_training in enumerate(self.training_members):
                if was_training and self.outcomes[i] is not None:
                    self.on_stop(i)

    def _save_checkpoints(self) -> None:
        """Each member still training, or stopped in this epoch, writes its checkpoint (zoo.checkpoint)."""
        from zoo import checkpoint

        order = self.trainer.datamodule.train_batches.order_state()
        for i, (member, scheduler) in enumerate(zip(self.step_fn.members, self.schedulers_)):
            if self.saved_stop[i]:
                continue
            rng = member.rng_state if member.rng_state is not None else torch.get_rng_state()
            checkpoint.save(self.run_dirs[i], {
                "epoch": self.epoch, "model": member.model.state_dict(), "optimizer": member.optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "rng": rng, "order": order, "history": self.histories[i],
                "outcome": list(self.outcomes[i]) if self.outcomes[i] else None,
                "train_seconds": self.train_seconds(i), "resumed_at": self.resumed_at[i]})
            self.saved_stop[i] = self.outcomes[i] is not None

    def configure_optimizers(self):
        t = self.train_cfg
        cuda = self.device.type == "cuda"
        graphs = cuda and t.cuda_graphs
        members = []
        self.schedulers_ = []
        for cfg, model, rng in zip(self.cfgs, self.models, self.rng_states):
            opt = build_optimizer(model, cfg.train, cuda, graphs)
            self.schedulers_.append(torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg.train, self.steps_per_epoch)))
            forward = torch.compile(model, dynamic=False) if cuda and t.compile else model
            members.append(Member(model, forward, opt, rng))
        self.step_fn = TrainStep(members, self.bf16, t.grad_clip, graphs)
        for i, state in enumerate(self.resume or []):
            members[i].optimizer.load_state_dict(state["optimizer"])
            self.schedulers_[i].load_state_dict(state["scheduler"])
            if self.outcomes[i] is not None:
                self.step_fn.deactivate(i)
        return [m.optimizer for m in members]
