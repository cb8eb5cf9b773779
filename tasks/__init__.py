"""Synthetic tasks: MQAR (multi-query associative recall) and the S5 word problem."""
from tasks.registry import get_task, list_tasks, register_task
from tasks.split import Segment, build_split

__all__ = ["Segment", "build_split", "get_task", "list_tasks", "register_task"]
