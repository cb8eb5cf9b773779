"""MAD's selective copying (Poli et al., 2024; after Gu and Dao's selective copying task).

Vocabulary ``V``: data tokens ``[0, V-2)``, blank ``V-2``, copy token ``V-1``. With ``K`` tokens to copy
(``num_tokens_to_copy``) and length ``N`` (``input_seq_len``), ``B = N - 2K - 1`` blanks::

    position  0 ............................ N-K-2   N-K-1   N-K ... N-1
    input     x_1..x_K with B blanks among them       copy    blank ... blank
    label     -                                        -       x_1  ...  x_K

* ``x_1..x_K``: uniform over the data tokens, with repeats.
* Blanks: each of the ``B`` blanks goes, uniformly and independently, just before one of ``x_1..x_K`` (MAD
  inserts them at indices drawn from ``[0, K)``), so ``x_K`` always sits right before the copy token.
* Labels at the last ``K`` positions, aligned with the inputs as MAD's are: the model reads the ``i``-th
  blank after the copy token and outputs ``x_i``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.tasks.base import IGNORE_INDEX, Task, check_int, make_generator
from zoo.tasks.registry import register_task
from zoo.errors import ConfigError


@register_task("selective_copying")
@dataclass(kw_only=True)
class SelectiveCopying(Task):
    """MAD's selective copying; see the module docstring."""

    vocab_size: int = 16
    input_seq_len: int = 256
    num_tokens_to_copy: int = 16

    def __post_init__(self):
        check_int("vocab_size", self.vocab_size, 3)
        check_int("num_tokens_to_copy", self.num_tokens_to_copy, 1)
        check_int("input_seq_len", self.input_seq_len, 1)
        if self.input_seq_len <= 2 * self.num_tokens_to_copy + 1:
            raise ConfigError("task.input_seq_len", self.input_seq_len,
                              f"an integer > 2 * num_tokens_to_copy + 1 = {2 * self.num_tokens_to_copy + 1}")

    @property
    def segment_name(self) -> str:
        return f"N{self.input_seq_len}_V{self.vocab_size}_copy{self.num_tokens_to_copy}"

    @property
    def chance(self) -> float:
        """Every label is a data token, uniform over the ``V - 2`` of them."""
        return 1 / (self.vocab_size - 2)

    def generate(self, num_examples: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels, two ``(num_examples, input_seq_len)`` int64 tensors on ``device``."""
        n, k, length, vocab = num_examples, self.num_tokens_to_copy, self.input_seq_len, self.vocab_size
        blanks = length - 2 * k - 1
        generator = make_generator(seed, device)
        device = generator.device
        data = torch.randint(0, vocab - 2, (n, k), generator=generator, device=device)
        gaps = torch.randint(0, k, (n, blanks), generator=generator, device=device)
        before = torch.zeros(n, k, dtype=torch.long, device=device).scatter_add_(1, gaps, torch.ones_like(gaps))
        positions = torch.arange(k, device=device) + before.cumsum(1)  # x_i after its own and earlier blanks
        inputs = torch.full((n, length), vocab - 2, dtype=torch.long, device=device).scatter_(1, positions, data)
        inputs[:, length - k - 1] = vocab - 1
        labels = torch.full_like(inputs, IGNORE_INDEX)
        labels[:, length - k:] = data
        return inputs, labels
