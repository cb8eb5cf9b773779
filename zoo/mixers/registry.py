"""The mixer registry: ``@register_mixer("name")`` makes a sequence mixer buildable from YAML.

A mixer is an ``nn.Module`` constructed as ``cls(d_model, layer_idx=0, max_seq_len=..., **kwargs)``
whose ``forward(x)`` maps ``(B, L, D) -> (B, L, D)`` causally (output ``t`` sees inputs ``<= t``).
The model also passes the shared model options ``MODEL_OPTIONS`` (``n_layers``, ``dropout``,
``positions``: "learned", "rope" or "none") to a constructor that has a parameter of that name;
they are set in ``model:``, never in ``mixer_kwargs``.

Optional hooks a mixer may define:

* ``state_size(seq_len) -> int``: the number of values (elements, not bytes) of state one sequence
  needs at inference after ``seq_len`` tokens: a KV cache, a recurrent state, a conv buffer
  (the leaderboard's ``state_size`` column, summed over layers).
* ``default_positions``: the positions used when ``model.positions`` is null ("none" when absent).
* ``uses_layer_state = True``: ``forward(x, layer_state)`` then also receives a dict shared by all
  layers of one model forward pass (RWKV-7 passes its first layer's values this way).
* ``outputs_at_positions = True``: ``forward(x, positions=positions)`` with positions (B, K) int64 returns the
  outputs at those rows alone, (B, K, D), the same numbers as the full output's rows there. The model asks for it in
  its last block when K is at most a quarter of L (``zoo.model.Block``; softmax, SWA and GatedFWA attend from K
  queries; every other built-in mixer runs its sequence work on every row and its read-out and last projection on
  the K rows).
"""
from __future__ import annotations

import inspect

from torch import nn

from zoo.errors import ConfigError
from zoo.registry import Registry

MIXERS = Registry("mixer", "model.mixer", ())  # importing this module imports zoo.mixers, which registers the built-ins
MODEL_OPTIONS = ("n_layers", "dropout", "positions")  # given by the model, not mixer kwargs
POSITIONS = ("learned", "rope", "none")  # values of model.positions


def register_mixer(name: str):
    """Class decorator that registers a sequence mixer under ``name``."""
    return MIXERS.register(name)


def list_mixers() -> list[str]:
    """Names of all registered mixers, sorted."""
    return MIXERS.names()


def get_mixer(name: str) -> type[nn.Module]:
    """The mixer class registered as ``name`` (user modules listed in a config's ``imports`` register too)."""
    return MIXERS.get(name)


def check_mixer_kwargs(name: str, kwargs: dict, key: str = "model.mixer_kwargs") -> None:
    """Reject keyword arguments that the mixer's constructor does not take."""
    cls = get_mixer(name)
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    accepted = [p for p in params if p not in ("self", "d_model", "layer_idx", "max_seq_len", *MODEL_OPTIONS)]
    for k in kwargs:
        if k not in accepted:
            raise ConfigError(f"{key}.{k}", kwargs[k], accepted or ["no keyword arguments"])
