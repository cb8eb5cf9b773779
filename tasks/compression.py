"""MAD's compression: encode a sequence into one pooled vector and recover every token from it.

Vocabulary ``V``: data tokens ``[0, V-1)``, compression token ``V-1``. An example of length ``N``
(``input_seq_len``) is ``N-1`` tokens uniform over the data tokens, then the compression token; the label at
every position is the input token there (the compression token included)::

    input   x_1  x_2  ...  x_{N-1}  C
    label   x_1  x_2  ...  x_{N-1}  C

These are MAD's inputs and targets (mad-lab ``generate_compression_instance``, which returns the inputs as
targets; its noise options are left off by MAD's benchmark and not offered here). The task is only a test of
compression under MAD's autoencoder (``zoo/autoencoder.py``): the mixer stack encodes the sequence, the
state at the last position (at ``C``) is the only thing passed on, and a position-wise MLP decodes each
token from it plus a sinusoidal embedding of the position. A causal language model scored at the same
positions would copy its input and learn nothing, so runs of this task must set ``model.backbone:
autoencoder`` (checked before training).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.tasks.base import Task, check_int, make_generator
from zoo.tasks.registry import register_task


@register_task("compression")
@dataclass(kw_only=True)
class Compression(Task):
    """MAD's compression; see the module docstring."""

    backbone = "autoencoder"  # the model this task needs (a class attribute, not a parameter)

    vocab_size: int = 16
    input_seq_len: int = 32

    def __post_init__(self):
        check_int("vocab_size", self.vocab_size, 2)
        check_int("input_seq_len", self.input_seq_len, 2)

    @property
    def segment_name(self) -> str:
        return f"N{self.input_seq_len}_V{self.vocab_size}"

    @property
    def chance(self) -> float:
        """Data labels are uniform over ``V - 1`` tokens; the last label is always ``C``."""
        return ((self.input_seq_len - 1) / (self.vocab_size - 1) + 1) / self.input_seq_len

    def generate(self, num_examples: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels, two ``(num_examples, input_seq_len)`` int64 tensors on ``device`` (equal)."""
        generator = make_generator(seed, device)
        inputs = torch.randint(0, self.vocab_size - 1, (num_examples, self.input_seq_len), generator=generator,
                               device=generator.device)
        inputs[:, -1] = self.vocab_size - 1
        return inputs, inputs.clone()
