"""The LightningModule: next-token loss at labelled positions, accuracy per test segment.

A batch is (inputs (B, N), positions (B, K), targets (B, K), segment index); see ``zoo.data``.
Accuracy counts labelled positions only, argmax over the full vocabulary; sequence accuracy counts
examples whose labelled positions are all right. Metrics accumulate on the device and are read
once per validation epoch, so training steps never wait for the host.
"""
from __future__ import annotations

import math
import time

import lightning as L
import torch
import torch.nn.functional as F
from omegaconf import DictConfig

from zoo.data import IGNORE
from zoo.model import LanguageModel
from zoo.step import TrainStep, autocast_bf16, labelled_logits


class Diverged(RuntimeError):
    """Training produced a non-finite loss."""


class MixerLM(L.LightningModule):
    """Wraps ``LanguageModel`` with the optimiser, schedule and metrics of one run config.

    Optimisation is manual: each training step is one ``zoo.step.TrainStep`` call (a CUDA-graph
    replay on GPU when ``train.cuda_graphs``), then one scheduler step. bf16 autocast is ours too, so
    the Trainer runs at "32-true" precision and adds nothing per step.
    """

    def __init__(self, cfg: DictConfig, model: LanguageModel, segment_names: list[str], steps_per_epoch: int,
                 bf16: bool):
        super().__init__()
        self.automatic_optimization = False
        self.cfg, self.model, self.bf16 = cfg, model, bf16
        self.segment_names = segment_names
        self.steps_per_epoch = steps_per_epoch
        self.forward_fn = torch.compile(model) if cfg.train.compile else model
        self.step_fn: TrainStep | None = None
        self.history: list[dict] = []  # one dict of validation metrics per epoch

    def training_step(self, batch, batch_idx):
        inputs, positions, targets, _ = batch
        loss = self.step_fn(inputs, positions, targets)
        self.scheduler.step()
        if batch_idx % self.trainer.log_every_n_steps == 0:
            self.log("train/loss", loss.detach().clone(), on_step=True, on_epoch=False, prog_bar=True)

    def on_train_epoch_start(self) -> None:
        self.epoch_started = time.perf_counter()

    def on_train_epoch_end(self) -> None:
        total = self.step_fn.take_epoch_loss_sum()
        if total is not None and not bool(torch.isfinite(total)):
            raise Diverged(f"non-finite training loss in epoch {self.current_epoch}")

    def on_validation_epoch_start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # once per epoch, so the epoch's time is the GPU's time
        self.epoch_seconds = time.perf_counter() - self.epoch_started
        # per segment: [loss sum, correct tokens, labelled tokens, correct sequences, sequences]
        self.val_sums = torch.zeros(len(self.segment_names), 5, device=self.device, dtype=torch.float64)

    def validation_step(self, batch, batch_idx):
        inputs, positions, targets, _ = batch
        with autocast_bf16(self.device, self.bf16):
            logits = labelled_logits(self.model, self.forward_fn, inputs, positions)
        labelled = targets != IGNORE
        right = (logits.argmax(-1) == targets) & labelled
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum")
        row = torch.stack([loss.double(), right.sum().double(), labelled.sum().double(),
                           (right == labelled).all(1).sum().double(), torch.tensor(len(targets), device=self.device,
                                                                                    dtype=torch.float64)])
        self.val_sums[batch[3]] += row

    def on_validation_epoch_end(self) -> None:
        sums = self.val_sums.cpu()
        total = sums.sum(0)
        metrics = {"val/loss": total[0] / total[2], "val/acc": total[1] / total[2], "val/seq_acc": total[3] / total[4]}
        if len(self.segment_names) > 1:
            for name, s in zip(self.segment_names, sums):
                metrics[f"val/acc/{name}"] = s[1] / s[2]
        metrics = {k: float(v) for k, v in metrics.items()}
        self.log_dict(metrics, prog_bar=False)
        self.log("val_acc", metrics["val/acc"], prog_bar=True)  # short name for the progress bar
        if not self.trainer.sanity_checking:
            self.history.append({"epoch": self.current_epoch, **metrics,
                                 "train_seconds": getattr(self, "epoch_seconds", None)})

    def configure_optimizers(self):
        t = self.cfg.train
        if t.decay_params == "all":
            groups = [{"params": list(self.model.parameters()), "weight_decay": t.weight_decay}]
        else:  # "matrices": decay weight matrices only, not biases, norms or embeddings
            decay, rest = [], []
            for name, p in self.model.named_parameters():
                (decay if p.ndim >= 2 and "embed" not in name else rest).append(p)
            groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": rest, "weight_decay": 0.0}]
        cuda = self.device.type == "cuda"
        graphs = cuda and t.cuda_graphs and not t.compile
        lr = torch.tensor(t.lr, device=self.device) if graphs else t.lr  # a graph reads lr from memory
        opt = torch.optim.AdamW(groups, lr=lr, betas=tuple(t.betas), fused=cuda, capturable=graphs)
        total = max(1, t.max_epochs * self.steps_per_epoch)
        warmup = int(t.warmup_epochs * self.steps_per_epoch)

        def lr_factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
        self.step_fn = TrainStep(self.model, self.forward_fn, opt, self.bf16, t.grad_clip, graphs)
        return opt
