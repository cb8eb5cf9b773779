"""MQAR: multi-query associative recall, with the semantics of Zoology (Arora, Eyuboglu et al., 2023).

One example of length ``N`` (``input_seq_len``) with ``K`` (``num_kv_pairs``) pairs and vocabulary ``V``::

    position  0   1   2   3  ...  C   C+1  C+2  ...  C+2g  C+2g+1 ...
    input     k1  v1  k2  v2 ...  .   .    .    ...  k_i   .
    label     -   -   -   -  ...  -   -    -    ...  v_i   -

* Keys: ``K`` distinct tokens drawn uniformly without replacement from ``[1, V//2)``; values: ``K`` distinct
  tokens drawn uniformly without replacement from ``[V//2, V)``; key ``i`` is bound to value ``i``.
* Context: ``k1 v1 k2 v2 ... kK vK`` repeated ``num_passes`` times (the JRT idea), length
  ``C = 2 * K * num_passes``, at positions ``[0, C)``.
* Queries: every key appears once more, key ``i`` at position ``C + 2 * g_i``. The gaps ``g_1..g_K`` are
  distinct slots of ``[0, (N - C) // 2)`` drawn one after another without replacement, each draw with
  probability proportional to ``a * (g + 1) ** (a - 1)`` over the slots still free (``a = power_a``; small
  ``a`` favours short gaps, ``a = 1`` is uniform). ``g_1`` is the first draw, so its law is exactly that
  power law. (Vectorized as the Gumbel-top-K trick, which has the same law as successive draws.)
* Labels (next-token prediction, Zoology's alignment): the label at query position ``p = C + 2 * g_i`` is
  ``v_i``: the model reads ``k_i`` at ``p`` and must predict the value as the next token. Every other label
  is -100, including all of the context.
* Filler: every position that is neither context nor query holds a token drawn uniformly from the whole
  vocabulary ``[0, V)`` when ``random_non_queries`` (so a filler token may equal a key or a value, as in
  Zoology), else 0.
* Constraints (as Zoology asserts): ``N`` even, ``V > N``, ``C + 2 * K <= N`` (``4 * K <= N`` for one pass).

Zoology draws with NumPy per example; here everything is batched torch on the requested device, seeded by
``torch.Generator(device).manual_seed(seed)``: deterministic for a given ``(seed, device)``, but CPU and
CUDA give different (equally distributed) data.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.tasks.base import IGNORE_INDEX, Task, check_bool, check_int, check_positive_float, make_generator
from zoo.tasks.registry import register_task
from zoo.errors import ConfigError


def sample_distinct(num_rows: int, k: int, low: int, high: int, generator: torch.Generator) -> torch.Tensor:
    """``(num_rows, k)`` int64: each row ``k`` distinct ints, a uniform random ordered draw from ``[low, high)``.

    Draws with replacement, then redraws every slot that repeats an earlier slot of its row until no row
    has a repeat. Each step treats all values alike, so the result is uniform over ordered k-subsets.
    """
    device = generator.device
    out = torch.randint(low, high, (num_rows, k), generator=generator, device=device)
    while True:
        sorted_values, order = out.sort(dim=1, stable=True)
        repeat_sorted = torch.zeros_like(out, dtype=torch.bool)
        repeat_sorted[:, 1:] = sorted_values[:, 1:] == sorted_values[:, :-1]
        repeat = torch.zeros_like(repeat_sorted).scatter_(1, order, repeat_sorted)
        num_repeats = int(repeat.sum())
        if num_repeats == 0:
            return out
        out[repeat] = torch.randint(low, high, (num_repeats,), generator=generator, device=device)


def sample_power_law_gaps(num_rows: int, k: int, space: int, power_a: float, generator: torch.Generator) -> torch.Tensor:
    """``(num_rows, k)`` int64: ``k`` distinct gaps from ``[0, space)``, in the order of successive draws
    without replacement with weights ``(g + 1) ** (power_a - 1)`` (Gumbel-top-k)."""
    device = generator.device
    log_weight = (power_a - 1) * torch.arange(1, space + 1, device=device, dtype=torch.float32).log()
    uniform = torch.rand(num_rows, space, generator=generator, device=device)
    scores = log_weight - (-uniform.log()).log()  # log weight + Gumbel noise
    return scores.topk(k, dim=1, sorted=True).indices


@register_task("mqar")
@dataclass(kw_only=True)
class MQAR(Task):
    """Multi-query associative recall (see the module docstring for the exact layout)."""

    vocab_size: int = 8192
    input_seq_len: int = 64
    num_kv_pairs: int = 8
    power_a: float = 0.01
    random_non_queries: bool = True
    num_passes: int = 1

    def __post_init__(self):
        check_int("input_seq_len", self.input_seq_len, 2)
        if self.input_seq_len % 2:
            raise ConfigError("task.input_seq_len", self.input_seq_len, "an even integer >= 2")
        check_int("num_kv_pairs", self.num_kv_pairs, 1)
        check_int("num_passes", self.num_passes, 1)
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int) or self.vocab_size <= self.input_seq_len:
            raise ConfigError("task.vocab_size", self.vocab_size, f"an integer > input_seq_len={self.input_seq_len}")
        check_positive_float("power_a", self.power_a)
        check_bool("random_non_queries", self.random_non_queries)
        most_pairs = self.input_seq_len // (2 * (self.num_passes + 1))
        if self.num_kv_pairs > most_pairs:
            raise ConfigError(
                "task.num_kv_pairs", self.num_kv_pairs,
                f"an integer in [1, {most_pairs}]: the context (2 * num_kv_pairs * num_passes tokens) and one "
                f"query slot pair per key must fit in input_seq_len={self.input_seq_len}",
            )

    @property
    def context_len(self) -> int:
        """``C``: the number of context tokens at the start, ``2 * num_kv_pairs * num_passes``."""
        return 2 * self.num_kv_pairs * self.num_passes

    @property
    def chance(self) -> float:
        """Accuracy of the best input-blind guess: every label is a value, uniform over ``[V//2, V)``."""
        return 1 / (self.vocab_size - self.vocab_size // 2)

    @property
    def segment_name(self) -> str:
        passes = f"_p{self.num_passes}" if self.num_passes > 1 else ""
        return f"N{self.input_seq_len}_kv{self.num_kv_pairs}{passes}"

    def generate(self, num_examples: int, seed: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels, two ``(num_examples, input_seq_len)`` int64 tensors on ``device``."""
        n, length, k, vocab = num_examples, self.input_seq_len, self.num_kv_pairs, self.vocab_size
        generator = make_generator(seed, device)
        keys = sample_distinct(n, k, 1, vocab // 2, generator)
        values = sample_distinct(n, k, vocab // 2, vocab, generator)
        context = self.context_len
        gaps = sample_power_law_gaps(n, k, (length - context) // 2, self.power_a, generator)
        if self.random_non_queries:
            inputs = torch.randint(0, vocab, (n, length), generator=generator, device=generator.device)
        else:
            inputs = torch.zeros(n, length, dtype=torch.long, device=generator.device)
        inputs[:, :context] = torch.stack((keys, values), dim=2).reshape(n, 2 * k).repeat(1, self.num_passes)
        query_positions = context + 2 * gaps
        inputs.scatter_(1, query_positions, keys)
        labels = torch.full_like(inputs, IGNORE_INDEX).scatter_(1, query_positions, values)
        return inputs, labels
