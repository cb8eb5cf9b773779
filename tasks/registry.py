"""The task registry: ``@register_task("name")`` makes a synthetic task buildable from YAML."""
from __future__ import annotations

from zoo.registry import Registry

BUILTINS = ("zoo.tasks.mqar", "zoo.tasks.s5", "zoo.tasks.word_problem", "zoo.tasks.recall", "zoo.tasks.fuzzy_recall", "zoo.tasks.copying",
            "zoo.tasks.memorization", "zoo.tasks.compression")
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
