"""zoo.spec.RunSpec: what a run needs from its task, worked out once, agrees with the data it describes."""
import pytest

from zoo.tasks.split import segment_chances
from zoo.config import make_run_config, plain, validate
from zoo.data import DeviceBatches, TaskDataModule
from zoo.errors import ConfigError
from zoo.spec import build_model, run_spec

TASK = {"name": "s5", "params": {"input_seq_len": 8, "group": "A5"},
        "train": [{"num_examples": 13}, {"num_examples": 7, "input_seq_len": 12}],
        "test": [{"num_examples": 5}, {"num_examples": 5, "input_seq_len": 20, "group": "S5"}]}


def test_spec_matches_the_generated_data():
    cfg = make_run_config({"task": TASK, "train": {"batch_size": 4}})
    spec = validate(cfg)
    data = TaskDataModule(cfg, "cpu")
    data.setup()
    assert [s.name for s in spec.train] == [s.name for s in data.train_segments]
    assert [s.name for s in spec.test] == [s.name for s in data.test_segments]
    assert [s.num_examples for s in spec.train] == [len(s) for s in data.train_segments]
    for batch_size in (1, 4, 7, 64):
        assert spec.steps_per_epoch(batch_size) == len(DeviceBatches(data.train_segments, batch_size, shuffle=False))
    assert spec.max_seq_len == 20 and spec.train_seq_len == 12 and spec.num_train_examples == 20
    assert spec.vocab_size == max(int(s.inputs.max()) + 1 for s in data.train_segments + data.test_segments)
    assert spec.test_chances() == segment_chances("s5", TASK["params"], TASK["test"], "test")


def test_spec_is_built_once_per_task_section():
    run = plain(make_run_config({"task": TASK}))
    other_lr = {**run, "train": {**run["train"], "lr": 0.5}}
    assert run_spec(run) is run_spec(other_lr)


def test_model_is_sized_by_the_spec():
    cfg = make_run_config({"task": TASK, "model": {"d_model": 16, "positions": "learned"}})
    spec = validate(cfg)
    model = build_model(plain(cfg.model), spec.vocab_size, spec.max_seq_len, device="meta")
    assert model.embed.num_embeddings == spec.vocab_size and model.pos_embed.num_embeddings == 20


@pytest.mark.parametrize("num_examples", [0, "5", True, None])
def test_num_examples_is_checked_once_with_its_key(num_examples):
    segment = {} if num_examples is None else {"num_examples": num_examples}
    with pytest.raises(ConfigError) as info:
        validate(make_run_config({"task": {**TASK, "test": [{"num_examples": 5}, segment]}}))
    assert info.value.key == "task.test[1].num_examples" and "integer >= 1" in str(info.value)
