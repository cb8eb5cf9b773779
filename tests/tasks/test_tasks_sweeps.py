"""The shipped sweeps of issue 12 expand and validate (every run's task parameters and model are checked)."""
from pathlib import Path

from zoo.sweep import load_sweep

SWEEPS = Path(__file__).parents[2] / "sweeps"


def test_mqar_extrapolate_tests_to_four_times_the_longest_training_length():
    sweep = load_sweep(SWEEPS / "mqar_extrapolate.yaml")
    assert len(sweep.runs) == 56
    task = sweep.runs[0].cfg.task
    assert max(s.input_seq_len for s in task.test) == 4 * max(s.input_seq_len for s in task.train) == 1024


def test_state_tracking():
    sweep = load_sweep(SWEEPS / "state_tracking.yaml")
    assert len(sweep.runs) == 144
    negative = [r for r in sweep.runs if r.cfg.model.mixer_kwargs.get("negative_eigenvalues")]
    assert len(negative) == 16 and {r.cfg.model.mixer for r in negative} == {"deltanet"}


def test_mad_has_each_difficulty_change_once_per_task():
    sweep = load_sweep(SWEEPS / "mad.yaml", ["model.mixer=softmax", "train.lr=0.001", "train.weight_decay=0.0"])
    tasks = [r.cfg.task.name for r in sweep.runs]
    counts = {name: tasks.count(name) for name in set(tasks)}
    assert counts == {"in_context_recall": 11, "fuzzy_in_context_recall": 11, "noisy_in_context_recall": 14,
                      "selective_copying": 13, "memorization": 6, "compression": 11}
    assert all((r.cfg.model.backbone == "autoencoder") == (r.cfg.task.name == "compression") for r in sweep.runs)
    recall = [r for r in sweep.runs if r.cfg.task.name.endswith("recall")]
    assert all(r.cfg.task.train[0].training and "training" not in r.cfg.task.test[0] for r in recall)
