"""Device-resident data: a split lives on the training device and batches are cut by indexing.

Labels are stored compactly as (positions, targets) of shape (n, K): the K labelled positions of
each example (padded with position 0 and target -100). The model then computes logits only at
those positions, which for MQAR is K = num_kv_pairs out of N, and no step ever syncs with the host.
"""
from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import torch
from omegaconf import DictConfig

from zoo.tasks.base import IGNORE_INDEX
from zoo.config import plain


@dataclass
class LabelledSegment:
    """One (N, kv)-style slice of a split. inputs (n, N); positions, targets (n, K)."""

    name: str
    inputs: torch.Tensor
    positions: torch.Tensor
    targets: torch.Tensor

    @classmethod
    def from_dense(cls, name: str, inputs: torch.Tensor, labels: torch.Tensor) -> "LabelledSegment":
        """Compact dense labels (n, N) with -100 where no loss into (positions, targets) (n, K). A row with fewer
        than K labels is padded with its first unlabelled positions (target -100), so the positions of a row are
        distinct, as the model's labelled-rows path asks (``zoo.model.Block``)."""
        mask = labels != IGNORE_INDEX
        K = max(int(mask.sum(1).max()), 1)
        # stable sort puts labelled positions first, in order; the rest, distinct unlabelled positions, is padding
        positions = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices[:, :K]
        targets = torch.where(mask.gather(1, positions), labels.gather(1, positions),
                              torch.full_like(positions, IGNORE_INDEX))
        return cls(name, inputs, positions, targets)

    def __len__(self) -> int:
        return self.inputs.shape[0]


class DeviceBatches:
    """An iterable of (inputs, positions, targets, segment index) batches over device-resident segments.

    Training shuffles examples within each segment every epoch and interleaves the segments' batches
    in a random order; evaluation walks a single segment in order. Randomness comes from a seeded
    generator on the data's device, so it never synchronises with the host.
    """

    def __init__(self, segments: list[LabelledSegment], batch_size: int, shuffle: bool, seed: int = 0):
        self.segments, self.batch_size, self.shuffle = segments, batch_size, shuffle
        device = segments[0].inputs.device
        self.generator = torch.Generator(device=device).manual_seed(seed) if shuffle else None
        self.interleave = torch.Generator().manual_seed(seed)  # orders the segments' batches, on the host

    def order_state(self) -> dict:
        """The generators that decide the coming epochs' order (CPU tensors)."""
        return {"examples": self.generator.get_state(), "segments": self.interleave.get_state()}

    def set_order_state(self, state: dict) -> None:
        self.generator.set_state(state["examples"])
        self.interleave.set_state(state["segments"])

    def _num_batches(self, segment: LabelledSegment) -> int:
        return -(-len(segment) // self.batch_size)

    def __len__(self) -> int:
        return sum(self._num_batches(s) for s in self.segments)

    def __iter__(self):
        plan = []
        for s_idx, seg in enumerate(self.segments):
            n = len(seg)
            order = (torch.randperm(n, device=seg.inputs.device, generator=self.generator) if self.shuffle
                     else None)
            for b in range(self._num_batches(seg)):
                plan.append((s_idx, order, b))
        if self.shuffle and len(self.segments) > 1:
            plan = [plan[i] for i in torch.randperm(len(plan), generator=self.interleave).tolist()]
        for s_idx, order, b in plan:
            seg = self.segments[s_idx]
            sl = slice(b * self.batch_size, (b + 1) * self.batch_size)
            idx = order[sl] if order is not None else sl
            yield seg.inputs[idx], seg.positions[idx], seg.targets[idx], s_idx


def build_segments(cfg: DictConfig, split: str, device: torch.device | str) -> list[LabelledSegment]:
    """Generate the ``split`` ("train" or "test") of a run config on ``device``."""
    from zoo.tasks.split import build_split

    common = plain(cfg.task.params)
    segments = build_split(cfg.task.name, common, [dict(s) for s in cfg.task[split]], split, cfg.seed, device)
    return [LabelledSegment.from_dense(s.name, s.inputs, s.labels) for s in segments]


class TaskDataModule(L.LightningDataModule):
    """Generates the train and test splits on the training device and serves them by indexing."""

    def __init__(self, cfg: DictConfig, device: torch.device | str):
        super().__init__()
        self.cfg, self.device = cfg, torch.device(device)
        self.train_segments: list[LabelledSegment] = []
        self.resume_order: dict | None = None
        self.test_segments: list[LabelledSegment] = []

    def setup(self, stage: str | None = None) -> None:
        if not self.train_segments:
            self.train_segments = build_segments(self.cfg, "train", self.device)
            self.test_segments = build_segments(self.cfg, "test", self.device)

    def train_dataloader(self):
        """The training batches; ``self.train_batches`` keeps them, so a checkpoint can save their order's
        generators and a resumed run can restore them (``resume_order``, set before the fit)."""
        self.train_batches = DeviceBatches(self.train_segments, self.cfg.train.batch_size, shuffle=True,
                                           seed=self.cfg.seed)
        if self.resume_order is not None:
            self.train_batches.set_order_state(self.resume_order)
        return self.train_batches

    def val_dataloader(self):
        bs = self.cfg.train.eval_batch_size or self.cfg.train.batch_size
        return DeviceBatches(self.test_segments, bs, shuffle=False)
