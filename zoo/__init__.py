"""zoo: a benchmark harness for sequence mixers on synthetic recall and reasoning tasks."""

__version__ = "0.1.0"
