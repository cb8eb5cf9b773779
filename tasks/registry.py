"""The task registry: ``@register_task("name")`` makes a synthetic task buildable from YAML."""
from __future__ import annotations

from zoo.registry import Registry

BUILTINS = ("tasks.mqar", "tasks.s5", "tasks.word_problem", "tasks.recall", "tasks.fuzzy_recall", "tasks.copying",
            "tasks.memorization", "tasks.compression")
TASKS = Registry("task", "task.name", BUILTINS)


def register_task(name: str):
    """Class decorator that registers a task class under ``name``."""
    return TASKS.register(name)


def list_tasks() -> list[str]:
    """Names of all registered tasks, sorted."""
    return TASKS.names()


def get_task(name: str) -> type:
    """The task class registered as ``name``."""
    return TASKS.get(name)
