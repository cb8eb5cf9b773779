"""The shipped sweeps of issue 12 expand and validate (every run's task parameters and model are checked)."""
from pathlib import Path

import pytest

from zoo.registry import list_mixers
from zoo.sweep import load_sweep

SWEEPS = Path(__file__).parents[2] / "sweeps"


def test_mqar_extrapolate_tests_to_four_times_the_longest_training_length():
    sweep = load_sweep(SWEEPS / "mqar_extrapolate.yaml")
    assert len(sweep.runs) == 56
    task = sweep.runs[0].cfg.task
    assert max(s.input_seq_len for s in task.test) == 4 * max(s.input_seq_len for s in task.train) == 1024


@pytest.mark.skipif("deltanet" not in list_mixers(), reason="needs the deltanet mixer of issue 12")
def test_state_tracking():
    sweep = load_sweep(SWEEPS / "state_tracking.yaml")
    assert len(sweep.runs) == 144
    negative = [r for r in sweep.runs if r.cfg.model.mixer_kwargs.get("negative_eigenvalues")]
    assert len(negative) == 16 and {r.cfg.model.mixer for r in negative} == {"deltanet"}
