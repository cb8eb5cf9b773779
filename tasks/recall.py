"""MAD's in-context recall and noisy in-context recall (Poli et al., 2024, "Mechanistic Design and Scaling of
Hybrid Architectures"), multi-query form as in MAD's benchmark.

Vocabulary ``V`` (``vocab_size``) with ``Z`` noise tokens (``noise_vocab_size``): ``W = V - Z`` recall tokens,
keys ``[0, W//2)``, values ``[W//2, W)``, noise ``[W, V)``. An example of length ``N`` (``input_seq_len``,
even) is ``N/2`` two-token slots::

    slot      0        1        ...  N/2-2          N/2-1 (the probe)
    input     k v      n n      ...  k v            k* v*
    label     - -      - -      ...  v -  (if k     v* -
                                           seen)

* Each example draws its own map: every key gets a value uniform over the values, independently.
* Context slots ``0..N/2-2``: each is a noise slot with probability ``frac_noise`` (two tokens uniform over the
  noise tokens), except one slot, uniform over the context, that never is; every other slot is a key uniform
  over the keys followed by its value.
* The probe slot: a key uniform over the distinct keys of the context slots, followed by its value.
* Labels (next-token, as MAD aligns them): at the key position of every slot whose key already appeared in an
  earlier slot, the value; -100 elsewhere (first occurrences, noise, values).
* ``training``: MAD's training form, every position labelled with the next token (the last with -100).

MAD's stream is one token longer than its input (its last value is only a target); here the input is the
whole stream, and the last position's label is unused, which a causal model cannot tell apart. MAD may draw
the never-noise slot as the probe slot; here it is a context slot, so a context key always exists.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.tasks.base import IGNORE_INDEX, Task, check_bool, check_int, make_generator
from zoo.tasks.registry import register_task
from zoo.errors import ConfigError


def next_token_labels(inputs: torch.Tensor) -> torch.Tensor:
    """``(n, N)``: ``labels[:, t] = inputs[:, t + 1]``, -100 at the last position (MAD's training targets)."""
    return torch.cat((inputs[:, 1:], torch.full_like(inputs[:, :1], IGNORE_INDEX)), dim=1)


def check_fraction(key: str, value) -> None:
    """Raise ConfigError("task.<key>") unless ``0 <= value < 1``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ConfigError(f"task.{key}", value, "a number in [0, 1)")


@register_task("in_context_recall")
@dataclass(kw_only=True)
class InContextRecall(Task):
    """MAD's (multi-query) in-context recall; see the module docstring."""

    vocab_size: int = 16
    input_seq_len: int = 128
    noise_vocab_size: int = 0
    frac_noise: float = 0.0
    training: bool = False

    def __post_init__(self):
        check_int("input_seq_len", self.input_seq_len, 4)
        if self.input_seq_len % 2:
            raise ConfigError("task.input_seq_len", self.input_seq_len, "an even integer >= 4")
        check_int("noise_vocab_size", self.noise_vocab_size, 0)
        check_int("vocab_size", self.vocab_size, 2 + self.noise_vocab_size)
        check_fraction("frac_noise", self.frac_noise)
        if self.frac_noise > 0 and self.noise_vocab_size == 0:
            raise ConfigError("task.noise_vocab_size", 0, "an integer >= 1 when frac_noise > 0")
        check_bool("training", self.training)

    @property
    def segment_name(self) -> str:
        noise = f"_noise{self.frac_noise:g}" if self.frac_noise > 0 else ""
        return f"N{self.input_seq_len}_V{self.vocab_size}{noise}{'_train' if self.training else ''}"

    @property
    def num_keys(self) -> int:
        return (self.vocab_size - self.noise_vocab_size) // 2

    @property
    def chance(self) -> float:
        """Every (evaluation) label is a value, uniform over the values."""
        return 1 / (self.vocab_size - self.noise_vocab_size - self.num_keys)

    def generate(self, num_examples: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels, two ``(num_examples, input_seq_len)`` int64 tensors on ``device``."""
        n, slots, keys_n = num_examples, self.input_seq_len // 2 - 1, self.num_keys
        recall = self.vocab_size - self.noise_vocab_size
        generator = make_generator(seed, device)
        device = generator.device
        value_of = torch.randint(keys_n, recall, (n, keys_n), generator=generator, device=device)
        keys = torch.randint(0, keys_n, (n, slots), generator=generator, device=device)
        noise = torch.rand(n, slots, generator=generator, device=device) < self.frac_noise
        noise[torch.arange(n, device=device), torch.randint(0, slots, (n,), generator=generator, device=device)] = False
        # without noise tokens (then no slot is noise) draw from a placeholder range that is never used
        noise_tokens = torch.randint(recall, max(self.vocab_size, recall + 1), (n, slots, 2), generator=generator,
                                     device=device)
        # first slot of each key among the non-noise slots (``slots`` where absent)
        slot_index = torch.arange(slots, device=device).expand(n, slots)
        first = torch.full((n, keys_n), slots, device=device).scatter_reduce(
            1, keys, torch.where(noise, slots, slot_index), reduce="amin")
        seen = ~noise & (first.gather(1, keys) < slot_index)
        present = first < slots
        probe = torch.where(present, torch.rand(n, keys_n, generator=generator, device=device), -1.0).argmax(1)
        all_keys = torch.cat((keys, probe[:, None]), dim=1)
        values = value_of.gather(1, all_keys)
        pairs = torch.stack((all_keys, values), dim=2)
        pairs[:, :slots] = torch.where(noise[..., None], noise_tokens, pairs[:, :slots])
        inputs = pairs.reshape(n, 2 * (slots + 1))
        if self.training:
            return inputs, next_token_labels(inputs)
        labelled = torch.cat((seen, torch.ones_like(seen[:, :1])), dim=1)
        labels = torch.full_like(pairs, IGNORE_INDEX)
        labels[..., 0] = torch.where(labelled, values, IGNORE_INDEX)
        return inputs, labels.reshape(n, -1)


@register_task("noisy_in_context_recall")
@dataclass(kw_only=True)
class NoisyInContextRecall(InContextRecall):
    """In-context recall with MAD's noise defaults: 16 of 32 tokens are noise, a fifth of the slots noisy."""

    vocab_size: int = 32
    noise_vocab_size: int = 16
    frac_noise: float = 0.2
