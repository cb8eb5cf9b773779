"""The LightningModule: next-token loss at labelled positions, accuracy per test segment, for a group
of models trained side by side (the runs of one cell that differ only in learning rate; see zoo.step).

A batch is (inputs (B, N), positions (B, K), targets (B, K), segment index); see ``zoo.data``.
The metrics are ``zoo.evaluation``'s, summed on the device (a CUDA-graph replay per test batch on GPU) and read
once per validation epoch, so neither training nor testing waits for the host.

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
from omegaconf import DictConfig
from torch import nn

from zoo import checkpoint
from zoo.evaluation import SUMS, EvalPass
from zoo.step import Member, TrainStep, build_optimizer, lr_factor


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
        self.test_fn: EvalPass | None = None
        self.histories: list[list[dict]] = [[] for _ in models]  # test metrics per epoch, per member
        self.outcomes: list[tuple[str, str] | None] = [None] * len(models)  # (status, reason) once stopped
        self.started = time.perf_counter()
        self.run_dirs, self.resume = run_dirs, resume
        self.epoch_offset = 0  # epochs finished before this fit (a resumed run)
        self.saved_stop = [False] * len(models)  # a stopped member's last checkpoint is written
        self.checkpoints = checkpoint.Writer()
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

    def _deactivate(self, i: int) -> None:
        """Member ``i`` neither trains nor is tested any more."""
        self.step_fn.deactivate(i)
        self.test_fn.deactivate(i)

    def _stop(self, i: int, status: str, reason: str) -> None:
        self.outcomes[i] = (status, reason)
        self._deactivate(i)
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
        # per member and segment: zoo.evaluation.SUMS
        self.test_sums = torch.zeros(len(self.models), len(self.segment_names), len(SUMS), device=self.device,
                                    dtype=torch.float64)
        self.test_started = time.perf_counter()

    def validation_step(self, batch, batch_idx):
        inputs, positions, targets, segment = batch
        self.test_sums[:, segment] += self.test_fn(inputs, positions, targets)  # stopped members add zeros

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        all_sums = self.test_sums.cpu()  # waits for the test pass: its seconds are the GPU's too
        test_seconds = time.perf_counter() - self.test_started
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
                     "test_seconds": test_seconds, "train/loss": self.train_loss[i]}
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
        stopped = [i for i, training in enumerate(self.training_members) if training and self.outcomes[i] is not None]
        if self.on_stop is not None and stopped:
            self.checkpoints.wait()  # their last checkpoints are on disk before their results are kept
            for i in stopped:
                self.on_stop(i)

    def _save_checkpoints(self) -> None:
        """Each member still training, or stopped in this epoch, writes its checkpoint (``zoo.checkpoint``), behind
        the next epoch's training."""
        states = []
        order = self.trainer.datamodule.train_batches.order_state()
        for i, (member, scheduler) in enumerate(zip(self.step_fn.members, self.schedulers_)):
            if self.saved_stop[i]:
                continue
            rng = member.rng_state if member.rng_state is not None else torch.get_rng_state()
            states.append((self.run_dirs[i], {
                "epoch": self.epoch, "model": member.model.state_dict(), "optimizer": member.optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "rng": rng, "order": order, "history": self.histories[i],
                "outcome": list(self.outcomes[i]) if self.outcomes[i] else None,
                "train_seconds": self.train_seconds(i), "resumed_at": self.resumed_at[i]}))
            self.saved_stop[i] = self.outcomes[i] is not None
        self.checkpoints.submit(states)

    def on_fit_end(self) -> None:
        self.checkpoints.wait()  # every checkpoint on disk before the results are written (and then discard them)

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
        self.test_fn = EvalPass(members, self.bf16, graphs)
        for i, state in enumerate(self.resume or []):
            members[i].optimizer.load_state_dict(state["optimizer"])
            self.schedulers_[i].load_state_dict(state["scheduler"])
            if self.outcomes[i] is not None:
                self._deactivate(i)
        return [m.optimizer for m in members]
