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
"""
from __future__ import annotations

import importlib
import inspect

from torch import nn

from zoo.errors import ConfigError

class Registry:
    """Names -> classes for one kind of component (mixers, tasks), filled by a class decorator.

    Args:
        kind: what the names are of, for error messages.
        key: the config key that names one (``ConfigError`` cites it).
        builtins: modules whose import registers the built-in components.
    """

    def __init__(self, kind: str, key: str, builtins: tuple[str, ...]):
        self.kind, self.key, self.builtins = kind, key, builtins
        self._classes: dict[str, type] = {}

    def register(self, name: str):
        def decorate(cls):
            if name in self._classes and self._classes[name] is not cls:
                raise ValueError(f"{self.kind} {name!r} is already registered by {self._classes[name].__qualname__}")
            self._classes[name] = cls
            return cls

        return decorate

    def _load_builtins(self) -> None:
        for module in self.builtins:
            importlib.import_module(module)

    def names(self) -> list[str]:
        self._load_builtins()
        return sorted(self._classes)

    def get(self, name: str) -> type:
        self._load_builtins()
        if name not in self._classes:
            raise ConfigError(self.key, name, list(self._classes))
        return self._classes[name]


MIXERS = Registry("mixer", "model.mixer", ("zoo.mixers",))
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
