"""The task registry: ``@register_task("name")`` makes a synthetic task buildable from YAML."""
from __future__ import annotations

import importlib

from zoo.errors import ConfigError

_TASKS: dict[str, type] = {}


def register_task(name: str):
    """Class decorator that registers a task class under ``name``."""

    def decorate(cls):
        if name in _TASKS and _TASKS[name] is not cls:
            raise ValueError(f"task {name!r} is already registered by {_TASKS[name].__qualname__}")
        _TASKS[name] = cls
        cls.task_name = name
        return cls

    return decorate


def _load_builtin_tasks() -> None:
    importlib.import_module("tasks.mqar")
    importlib.import_module("tasks.s5")


def list_tasks() -> list[str]:
    """Names of all registered tasks, sorted."""
    _load_builtin_tasks()
    return sorted(_TASKS)


def get_task(name: str) -> type:
    """The task class registered as ``name``."""
    _load_builtin_tasks()
    if name not in _TASKS:
        raise ConfigError("task.name", name, list(_TASKS))
    return _TASKS[name]
