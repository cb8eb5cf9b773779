"""Synthetic tasks: MQAR (multi-query associative recall) and the S5 word problem."""
from tasks.registry import get_task, list_tasks, register_task

__all__ = ["get_task", "list_tasks", "register_task"]
