"""MAD's fuzzy in-context recall: keys and values are motifs of several tokens (Poli et al., 2024).

Vocabulary ``V``: keys ``[0, W//2)``, values ``[W//2, W)`` with ``W = V - 1``, pad token ``V-1``. A key motif
is ``s_k`` distinct key tokens, a value motif ``s_v`` distinct value tokens; two key motifs are the same key
only if they have the same tokens in the same order (so also the same size). Sizes: ``s_v`` uniform over
``1..v`` (``value_motif_size``); ``s_k = k`` (``key_motif_size``), or uniform over ``1..k`` in ``training``
(MAD trains on keys of every size and tests on the longest).

An example of input length ``N`` (``input_seq_len``) is built from a stream of ``N + 1`` tokens, as MAD's::

    pad ... pad | k v | k v | ... | k* v* | ... | k v | k* v*
                  context pairs (one is the probe pair)    the probe again

* The probe: a key motif ``k*`` and a value motif ``v*``, sizes drawn as above (total ``p``).
* Context pairs, left to right: a key motif, uniform over the motifs of its size, then its value: a key seen
  earlier in the example takes the value it had then, the probe key always takes ``v*``, any other key a value
  motif uniform over those of its size. Pairs are appended while the context is shorter than
  ``T = N - p - (k + v)``; one of the pairs that always fit (the first ``ceil(T / (k + v))``), uniform, is the
  probe pair.
* Then the probe pair again, and pad tokens on the left up to ``N + 1`` tokens.
* Inputs are the first ``N`` stream tokens; labels are next-token: the position before each value token of a
  pair whose key appeared in an earlier pair (the final probe included) holds that value token, all others
  -100. In ``training`` every position is labelled with the next stream token (MAD's training targets).

MAD inserts the probe pair at the first pair boundary past a uniform token position; here it is a uniform
pair among those that always fit, which keeps generation vectorised.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.tasks.base import IGNORE_INDEX, Task, check_bool, check_int, make_generator
from zoo.tasks.mqar import sample_distinct
from zoo.tasks.registry import register_task
from zoo.errors import ConfigError


@register_task("fuzzy_in_context_recall")
@dataclass(kw_only=True)
class FuzzyInContextRecall(Task):
    """MAD's fuzzy in-context recall (multi-query form); see the module docstring."""

    vocab_size: int = 16
    input_seq_len: int = 128
    key_motif_size: int = 3
    value_motif_size: int = 3
    training: bool = False

    def __post_init__(self):
        check_int("key_motif_size", self.key_motif_size, 1)
        check_int("value_motif_size", self.value_motif_size, 1)
        check_int("vocab_size", self.vocab_size, 3)
        width = self.vocab_size - 1
        if width // 2 < self.key_motif_size or width - width // 2 < self.value_motif_size:
            least = 1 + max(2 * self.key_motif_size, 2 * self.value_motif_size - 1)
            raise ConfigError("task.vocab_size", self.vocab_size,
                              f"an integer >= {least}: a motif's tokens are distinct, so (vocab_size - 1) // 2 "
                              "keys must cover key_motif_size and the values value_motif_size")
        pair = self.key_motif_size + self.value_motif_size
        check_int("input_seq_len", self.input_seq_len, 2 * pair + 1)
        check_bool("training", self.training)

    @property
    def segment_name(self) -> str:
        return (f"N{self.input_seq_len}_V{self.vocab_size}_k{self.key_motif_size}v{self.value_motif_size}"
                f"{'_train' if self.training else ''}")

    @property
    def chance(self) -> float:
        """Every (evaluation) label is a value token; each is uniform over the values."""
        width = self.vocab_size - 1
        return 1 / (width - width // 2)

    def _motifs(self, count: int, generator) -> tuple[torch.Tensor, ...]:
        """``count`` (key tokens ``(count, k)``, key sizes, value tokens ``(count, v)``, value sizes)."""
        k, v, width, device = self.key_motif_size, self.value_motif_size, self.vocab_size - 1, generator.device
        keys = sample_distinct(count, k, 0, width // 2, generator)  # the first s of k distinct: s distinct
        values = sample_distinct(count, v, width // 2, width, generator)
        if self.training:
            key_sizes = torch.randint(1, k + 1, (count,), generator=generator, device=device)
        else:
            key_sizes = torch.full((count,), k, device=device)
        value_sizes = torch.randint(1, v + 1, (count,), generator=generator, device=device)
        return keys, key_sizes, values, value_sizes

    def generate(self, num_examples: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels, two ``(num_examples, input_seq_len)`` int64 tensors on ``device``."""
        n, length, k, v = num_examples, self.input_seq_len, self.key_motif_size, self.value_motif_size
        generator = make_generator(seed, device)
        device = generator.device
        num_keys = (self.vocab_size - 1) // 2
        pairs = (length - k - v) // 2 + 1  # enough candidates: every kept pair is at least 2 tokens
        keys, key_sizes, values, value_sizes = (t.view(n, pairs + 1, -1) if t.dim() == 2 else t.view(n, pairs + 1)
                                                for t in self._motifs(n * (pairs + 1), generator))
        # the last candidate is the probe; it replaces a uniform pair among those that always fit
        probe_len = key_sizes[:, -1] + value_sizes[:, -1]
        budget = length - probe_len - (k + v)  # T: pairs start while the context is shorter
        always = (budget + k + v - 1) // (k + v)
        slot = (torch.rand(n, generator=generator, device=device) * always).long()
        rows = torch.arange(n, device=device)
        for t in (keys, key_sizes, values, value_sizes):
            t[rows, slot] = t[:, -1].clone()

        # a key's identity: its tokens in base (num_keys + 1), unused places holding num_keys
        place = torch.arange(k, device=device)
        digits = torch.where(place < key_sizes[..., None], keys, num_keys)
        codes = (digits * (num_keys + 1) ** place).sum(-1)  # (n, pairs + 1)
        is_probe = codes == codes[:, -1:]
        values = torch.where(is_probe[..., None], values[:, -1:], values)
        value_sizes = torch.where(is_probe, value_sizes[:, -1:], value_sizes)
        # every key takes the value of its first occurrence (stable sort keeps earlier pairs first)
        sorted_codes, order = codes[:, :-1].sort(dim=1, stable=True)
        starts = torch.ones_like(sorted_codes, dtype=torch.bool)
        starts[:, 1:] = sorted_codes[:, 1:] != sorted_codes[:, :-1]
        index = torch.arange(pairs, device=device).expand(n, pairs)
        first_sorted = order.gather(1, torch.where(starts, index, 0).cummax(1).values)
        first = torch.empty_like(order).scatter_(1, order, first_sorted)
        values = torch.cat((values[:, :-1].gather(1, first[..., None].expand(n, pairs, v)), values[:, -1:]), 1)
        value_sizes = torch.cat((value_sizes[:, :-1].gather(1, first), value_sizes[:, -1:]), 1)
        repeated = torch.cat((first < index, torch.ones_like(first[:, :1], dtype=torch.bool)), 1)

        sizes = key_sizes + value_sizes
        start = sizes.cumsum(1) - sizes
        kept = start < budget[:, None]
        kept[:, -1] = True
        context_end = (sizes[:, :-1] * kept[:, :-1]).sum(1)
        start[:, -1] = context_end
        offset = length + 1 - (context_end + probe_len)  # pads on the left
        # token o of a pair: key token o, then value token o - s_k, up to s_k + s_v tokens
        o = torch.arange(k + v, device=device)
        is_value = o >= key_sizes[..., None]
        pick = torch.where(is_value, k + o - key_sizes[..., None], o).clamp(max=k + v - 1)
        tokens = torch.cat((keys, values), dim=2).gather(2, pick)
        valid = (o < sizes[..., None]) & kept[..., None]
        position = offset[:, None, None] + start[..., None] + o
        stream = torch.full((n, length + 1), self.vocab_size - 1, dtype=torch.long, device=device)
        flat = rows[:, None, None] * (length + 1) + position
        stream.view(-1)[flat[valid]] = tokens[valid]
        inputs = stream[:, :length].contiguous()
        if self.training:
            return inputs, stream[:, 1:].contiguous()
        labels = torch.full_like(inputs, IGNORE_INDEX)
        target = valid & is_value & repeated[..., None]
        labels.view(-1)[(flat - 1 - rows[:, None, None])[target]] = tokens[target]
        return inputs, labels
