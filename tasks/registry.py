"""The task registry: ``@register_task("name")`` makes a synthetic task buildable from YAML."""
from __future__ import annotations

from zoo.registry import Registry

TASKS = Registry("task", "task.name", ("tasks.mqar", "tasks.s5", "tasks.word_problem"))


def register_task(name: str):
    """Class decorator that registers a task class under ``name``."""
    return TASKS.register(name)


def list_tasks() -> list[str]:
    """Names of all registered tasks, sorted."""
    return TASKS.names()


def get_task(name: str) -> type:
    """The task class registered as ``name``."""
    return TASKS.get(name)
