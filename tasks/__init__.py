"""Synthetic tasks: MQAR, MAD's suite, and word problems (state tracking); see README.md."""
from zoo.tasks.registry import get_task, list_tasks, register_task
from zoo.tasks.split import Segment, build_split

__all__ = ["Segment", "build_split", "get_task", "list_tasks", "register_task"]
