"""What every synthetic task shares: keyword parameters checked before anything runs.

A task is a ``@dataclass(kw_only=True)`` subclass of :class:`Task`; its fields are its parameters, so
``dataclasses.fields(cls)`` (or :meth:`Task.param_names`) lists what it accepts. Building it as
``cls(**params)`` raises :class:`zoo.errors.ConfigError` for an unknown name (in ``__new__``, before the
dataclass ``__init__`` would raise a bare ``TypeError``) and, in the subclass's ``__post_init__``, for a
value that cannot work.

Every task provides:

* ``vocab_size -> int``: inputs and labels (other than -100) lie in ``[0, vocab_size)``;
* ``seq_len -> int``: the input length ``N`` (by default the field ``input_seq_len``);
* ``segment_name -> str``: a short name for a slice of a split that starts with ``N<input length>``,
  e.g. ``"N256_kv16"`` (figures read the length from it);
* ``chance -> float``: the accuracy of the best guess that does not read the tokens, over the labelled
  positions (chance-corrected accuracy is ``(accuracy - chance) / (1 - chance)``);
* ``generate(num_examples, seed, device) -> (inputs, labels)``: two ``(num_examples, N)`` int64 tensors on
  ``device``, labels ``-100`` where no loss is taken; the same ``(seed, device)`` gives the same data.

and may provide ``describe_tokens(ids) -> list[str]`` (readable names for ``python -m zoo.tasks --show``) and set
``backbone``, the model its runs must use (``model.backbone``; "lm" unless the task says otherwise).
"""
from __future__ import annotations

import dataclasses
import math

import torch

from zoo.errors import ConfigError

IGNORE_INDEX = -100


class Task:
    """Base of the synthetic tasks (see the module docstring for the interface)."""

    backbone = "lm"  # the model its runs must use (``model.backbone``, checked before training)

    def __new__(cls, *args, **params):
        accepted = cls.param_names()
        for key, value in params.items():
            if key not in accepted:
                raise ConfigError(f"task.{key}", value, accepted)
        return super().__new__(cls)

    @classmethod
    def param_names(cls) -> list[str]:
        """The parameter names this task accepts."""
        return [f.name for f in dataclasses.fields(cls)]

    @property
    def seq_len(self) -> int:
        """The input length N: the ``input_seq_len`` parameter unless a task says otherwise."""
        return self.input_seq_len

    def params(self) -> dict:
        """The parameters of this task, defaults filled in."""
        return dataclasses.asdict(self)


def check_int(key: str, value, minimum: int) -> None:
    """Raise ConfigError("task.<key>") unless ``value`` is an int (not a bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"task.{key}", value, f"an integer >= {minimum}")


def check_bool(key: str, value) -> None:
    """Raise ConfigError("task.<key>") unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise ConfigError(f"task.{key}", value, [True, False])


def check_positive_float(key: str, value) -> None:
    """Raise ConfigError("task.<key>") unless ``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise ConfigError(f"task.{key}", value, "a finite number > 0")


def make_generator(seed: int, device) -> torch.Generator:
    """A torch generator on ``device`` seeded with ``seed`` (an int in ``[0, 2**64)``)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ConfigError("seed", seed, "an integer in [0, 2**64)")
    return torch.Generator(device=torch.device(device)).manual_seed(seed)
