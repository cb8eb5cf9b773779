"""python -m zoo.tasks <name> key=value --show [K] [--format json]."""
import json
import re
import subprocess
import sys

from zoo.tasks import get_task
from zoo.tasks.__main__ import main, parse_value

MQAR_ARGS = ["mqar", "input_seq_len=16", "num_kv_pairs=2", "vocab_size=32", "random_non_queries=false"]


def test_parse_value():
    assert [parse_value(t) for t in ["3", "0.5", "True", "false", "A5"]] == [3, 0.5, True, False, "A5"]


def test_show_alone_prints_three_examples(capsys):
    assert main(MQAR_ARGS + ["--show"]) == 0
    assert capsys.readouterr().out.count("--- example ") == 3


def test_human_format_shows_only_labelled_positions(capsys):
    assert main(MQAR_ARGS + ["--show", "2"]) == 0
    out = capsys.readouterr().out
    inputs, labels = get_task("mqar")(input_seq_len=16, num_kv_pairs=2, vocab_size=32,
                                      random_non_queries=False).generate(2, seed=0)
    blocks = out.split("--- example ")[1:]
    assert len(blocks) == 2 and "-100" not in out
    for block, example_inputs, example_labels in zip(blocks, inputs.tolist(), labels.tolist()):
        rows = {line.split()[0]: line for line in block.splitlines()[1:] if line.strip()}
        assert rows["input"].split()[1:] == [str(i) for i in example_inputs]
        # right-aligned columns: each label ends in the same column as its position number
        label_cells = {m.end(): m.group() for m in re.finditer(r"\d+", rows["label"])}
        position_cells = {m.end(): int(m.group()) for m in re.finditer(r"\d+", rows["pos"])}
        labelled = {p: str(v) for p, v in enumerate(example_labels) if v != -100}
        assert {position_cells[end]: value for end, value in label_cells.items()} == labelled


def test_json_format(capsys):
    assert main(["s5", "group=A5", "input_seq_len=6", "final_only=true", "--show", "3", "--format", "json",
                 "--seed", "5"]) == 0
    document = json.loads(capsys.readouterr().out)
    task = get_task("s5")(group="A5", input_seq_len=6, final_only=True)
    inputs, labels = task.generate(3, seed=5)
    assert document["params"] == {"group": "A5", "input_seq_len": 6, "final_only": True}
    assert [e["inputs"] for e in document["examples"]] == inputs.tolist()
    assert [e["labels"] for e in document["examples"]] == labels.tolist()
    first = document["examples"][0]
    assert first["input_names"] == task.describe_tokens(inputs[0]) and first["label_names"][:5] == [None] * 5
    assert first["label_names"][5] == task.describe_tokens(labels[0, 5:])[0]


def test_bad_parameter_exits_with_message(capsys):
    assert main(["s5", "group=S7"]) == 2
    assert "task.group='S7'" in capsys.readouterr().err
    assert main(["mqar", "num_kv_pairs"]) == 2


def test_module_entry_point():
    result = subprocess.run([sys.executable, "-m", "zoo.tasks", "s5", "input_seq_len=4", "--show", "1"],
                            capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    assert "example 0" in result.stdout and sum(line.startswith("label") for line in lines) == 1
    names = set(get_task("s5")().describe_tokens(range(120)))
    assert sum(bool(line.split()) and set(line.split()) <= names for line in lines) == 2  # input and label names
