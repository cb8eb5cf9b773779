"""The Ray backend runs the same runs as Ray tasks and gathers results into the same results.jsonl."""
import pytest

from zoo.results import read_jsonl
from zoo.sweep import main as sweep_main

ray = pytest.importorskip("ray", reason="pip install -e .[ray] (installed by the test extras)")


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_backend_matches_local_layout(write_sweep, tmp_path, local_ray):
    path = write_sweep(grid={"model.mixer": ["softmax", "swa"]})
    assert sweep_main([str(path), "--backend", "ray"]) == 0
    out = tmp_path / "out"
    records = read_jsonl(out / "results.jsonl")
    assert sorted(r["mixer"] for r in records) == ["softmax", "swa"]
    assert all(r["status"] == "completed" for r in records)
    for r in records:
        run_dir = out / "runs" / r["id"]
        assert (run_dir / "result.json").exists() and (run_dir / "config.yaml").exists()
        assert "test/acc" in (run_dir / "metrics.csv").read_text()
    assert sweep_main([str(path), "--backend", "ray"]) == 0  # finished runs are not redone
    assert len(read_jsonl(out / "results.jsonl")) == 2
