"""Look at a task's data: ``python -m zoo.tasks <name> key=value ... --show [K] [--format json]``.

Example: ``python -m zoo.tasks mqar input_seq_len=32 num_kv_pairs=4 vocab_size=64 --show 2``. The human format
prints each example in aligned blocks of columns: position, input, label (blank where the label is -100),
and for tasks with token names (S5) the name of each input and label token under its id.
"""
from __future__ import annotations

import argparse
import json
import sys

from zoo.tasks.registry import get_task, list_tasks
from zoo.errors import ConfigError

LINE_WIDTH = 100


def parse_value(text: str):
    """``"true"``/``"false"`` -> bool, then int, then float, else the string itself."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_params(pairs: list[str]) -> dict:
    """``["key=value", ...]`` -> ``{key: parsed value}``."""
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError("task parameter", pair, "key=value")
        params[key] = parse_value(value)
    return params


def example_rows(task, inputs: list[int], labels: list[int]) -> list[tuple[str, list[str]]]:
    """The labelled rows of one example, each a list of one cell per position."""
    shown = [label != -100 for label in labels]
    rows = [("pos", [str(i) for i in range(len(inputs))]), ("input", [str(i) for i in inputs])]
    describe = getattr(task, "describe_tokens", None)
    if describe:
        rows.append(("", describe(inputs)))
    rows.append(("label", [str(label) if keep else "" for label, keep in zip(labels, shown)]))
    if describe:
        names = describe([label if keep else 0 for label, keep in zip(labels, shown)])
        rows.append(("", [name if keep else "" for name, keep in zip(names, shown)]))
    return rows


def format_example(rows: list[tuple[str, list[str]]]) -> str:
    """Rows as aligned columns, wrapped into blocks of at most ``LINE_WIDTH`` characters."""
    head = max(len(title) for title, _ in rows) + 1
    widths = [max(len(cells[i]) for _, cells in rows) + 1 for i in range(len(rows[0][1]))]
    blocks, start = [], 0
    while start < len(widths):
        stop, used = start, head
        while stop < len(widths) and (stop == start or used + widths[stop] <= LINE_WIDTH):
            used += widths[stop]
            stop += 1
        blocks.append("\n".join(
            (title.ljust(head) + "".join(cell.rjust(w) for cell, w in zip(cells[start:stop], widths[start:stop]))).rstrip()
            for title, cells in rows
        ))
        start = stop
    return "\n\n".join(blocks)


def show(task, name: str, count: int, seed: int, device: str, fmt: str) -> str:
    """``count`` examples of ``task`` as text (``fmt="human"``) or one JSON document (``fmt="json"``)."""
    inputs, labels = task.generate(count, seed, device)
    examples = list(zip(inputs.tolist(), labels.tolist()))
    describe = getattr(task, "describe_tokens", None)
    if fmt == "json":
        records = []
        for example_inputs, example_labels in examples:
            record = {"inputs": example_inputs, "labels": example_labels}
            if describe:
                record["input_names"] = describe(example_inputs)
                record["label_names"] = [None if label == -100 else describe([label])[0] for label in example_labels]
            records.append(record)
        document = {"task": name, "params": task.params(), "vocab_size": task.vocab_size, "seq_len": task.seq_len,
                    "seed": seed, "examples": records}
        return json.dumps(document)
    header = (f"task {name} {task.params()}  vocab_size={task.vocab_size} seq_len={task.seq_len} seed={seed}")
    parts = [header]
    for index, (example_inputs, example_labels) in enumerate(examples):
        parts.append(f"--- example {index} ---\n" + format_example(example_rows(task, example_inputs, example_labels)))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.tasks", description="Show examples of a synthetic task.")
    parser.add_argument("name", help=f"task name, one of {', '.join(list_tasks())}")
    parser.add_argument("params", nargs="*", help="task parameters as key=value")
    parser.add_argument("--show", type=int, nargs="?", const=3, default=3, metavar="K",
                        help="how many examples to print (default, and --show alone: 3)")
    parser.add_argument("--format", choices=("human", "json"), default="human")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    try:
        if args.show < 1:
            raise ConfigError("--show", args.show, "an integer >= 1")
        task = get_task(args.name)(**parse_params(args.params))
        print(show(task, args.name, args.show, args.seed, args.device, args.format))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
