"""The mixer registry: ``@register_mixer("name")`` makes a sequence mixer buildable from YAML.

A mixer is an ``nn.Module`` constructed as ``cls(d_model, layer_idx=0, max_seq_len=..., **kwargs)``
whose ``forward(x)`` maps ``(B, L, D) -> (B, L, D)`` causally (output ``t`` sees inputs ``<= t``).

Optional hooks a mixer may define:

* ``state_size(seq_len) -> int``: bytes of recurrent state per sequence (shown in the leaderboard).
* ``uses_layer_state = True``: ``forward(x, layer_state)`` then also receives a dict shared by all
  layers of one model forward pass (RWKV-7 passes its first layer's values this way).
"""
from __future__ import annotations

import importlib
import inspect

from torch import nn

from zoo.errors import ConfigError

_MIXERS: dict[str, type[nn.Module]] = {}


def register_mixer(name: str):
    """Class decorator that registers a sequence mixer under ``name``."""

    def decorate(cls):
        if name in _MIXERS and _MIXERS[name] is not cls:
            raise ValueError(f"mixer {name!r} is already registered by {_MIXERS[name].__qualname__}")
        _MIXERS[name] = cls
        cls.mixer_name = name
        return cls

    return decorate


def _load_builtin_mixers() -> None:
    importlib.import_module("zoo.mixers")


def list_mixers() -> list[str]:
    """Names of all registered mixers, sorted."""
    _load_builtin_mixers()
    return sorted(_MIXERS)


def get_mixer(name: str) -> type[nn.Module]:
    """The mixer class registered as ``name`` (user modules listed in a config's ``imports`` register too)."""
    _load_builtin_mixers()
    if name not in _MIXERS:
        raise ConfigError("model.mixer", name, list(_MIXERS))
    return _MIXERS[name]


def check_mixer_kwargs(name: str, kwargs: dict, key: str = "model.mixer_kwargs") -> None:
    """Reject keyword arguments that the mixer's constructor does not take."""
    cls = get_mixer(name)
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    accepted = [p for p in params if p not in ("self", "d_model", "layer_idx", "max_seq_len")]
    for k in kwargs:
        if k not in accepted:
            raise ConfigError(f"{key}.{k}", kwargs[k], accepted or ["no keyword arguments"])
