from pathlib import Path

import pytest
from omegaconf import OmegaConf

HERE = Path(__file__).parent


@pytest.fixture
def faulty_mixers(monkeypatch):
    """Make tests/harness/faulty_mixers.py importable here and in sweep worker processes."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("PYTHONPATH", f"{HERE}:{Path.cwd()}")
    return "faulty_mixers"


def _tiny_base(**train):
    return {
        "task": {"name": "mqar", "params": {"vocab_size": 64, "input_seq_len": 16, "num_kv_pairs": 2},
                 "train": [{"num_examples": 256}], "test": [{"num_examples": 64}]},
        "model": {"d_model": 16, "n_layers": 1},
        "train": {"batch_size": 64, "max_epochs": 1, "lr": 1e-3, "progress_bar": False, **train},
    }


@pytest.fixture
def tiny_base():
    """A run config small enough that one run takes a few seconds on a CPU; kwargs update `train`."""
    return _tiny_base


@pytest.fixture
def write_sweep(tmp_path):
    def write(grid, base=None, **extra):
        spec = {"name": "t", "out": str(tmp_path / "out"), "base": base or _tiny_base(), "grid": grid, **extra}
        path = tmp_path / "sweep.yaml"
        OmegaConf.save(OmegaConf.create(spec), path)
        return path

    return write
