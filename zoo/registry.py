"""Names -> classes, filled by a class decorator: the machinery behind the mixer and task registries.

Part of the base layer (with ``zoo.errors`` and ``zoo.optional``): it imports nothing of zoo but
``zoo.errors``, so ``tasks``, ``kernels`` and every part of ``zoo`` can use it (see ``tests/test_layers.py``).
"""
from __future__ import annotations

import importlib

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
