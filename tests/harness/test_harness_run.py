"""python -m zoo.run: one run, with the sweep's folder layout, skip and result writer."""
from omegaconf import OmegaConf

from zoo.results import final_records, read_jsonl
from zoo.run import main as run_main


def test_single_run_is_a_sweep_of_one(tmp_path, tiny_base, capsys):
    config = tmp_path / "run.yaml"
    OmegaConf.save(OmegaConf.create(tiny_base()), config)
    out = tmp_path / "out"
    assert run_main([str(config), "--out", str(out)]) == 0
    (record,) = read_jsonl(out / "results.jsonl")
    run_dir = out / "runs" / record["id"]
    assert record["status"] == "completed" and "test/acc" in (run_dir / "metrics.csv").read_text()
    assert (run_dir / "result.json").exists() and not (run_dir / "checkpoint.pt").exists()
    assert list(final_records(out)) == [record["id"]]  # what the sweep and the leaderboard call done
    assert run_main([str(config), "--out", str(out)]) == 0
    assert "already completed" in capsys.readouterr().out
    assert len(read_jsonl(out / "results.jsonl")) == 1
    assert run_main([str(config), "--out", str(out), "--force"]) == 0
    assert len(read_jsonl(out / "results.jsonl")) == 2
