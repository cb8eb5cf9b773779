"""The shipped sweeps of issue 12 expand and validate (every run's task parameters and model are checked)."""
import json
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


def test_s5_protocol_is_state_tracking_on_s5_under_the_mqar_protocol():
    sweep = load_sweep(SWEEPS / "s5_protocol.yaml")
    assert sweep.name == "s5_protocol" and len(sweep.runs) == 72
    assert {(r.cfg.task.name, r.cfg.task.params.group, r.cfg.train.max_epochs) for r in sweep.runs} == {
        ("word_problem", "S5", 64)}
    assert sorted({r.cfg.train.lr for r in sweep.runs}) == [1e-4, 4.6416e-4, 2.1544e-3, 1e-2]
    assert {r.cfg.model.mixer for r in sweep.runs} == {r.cfg.model.mixer for r in load_sweep(
        SWEEPS / "state_tracking.yaml").runs}


def test_mad_has_each_difficulty_change_once_per_task():
    sweep = load_sweep(SWEEPS / "mad.yaml", ["model.mixer=softmax", "train.lr=0.001", "train.weight_decay=0.0"])
    tasks = [r.cfg.task.name for r in sweep.runs]
    counts = {name: tasks.count(name) for name in set(tasks)}
    assert counts == {"in_context_recall": 11, "fuzzy_in_context_recall": 11, "noisy_in_context_recall": 14,
                      "selective_copying": 13, "memorization": 6, "compression": 11}
    assert all((r.cfg.model.backbone == "autoencoder") == (r.cfg.task.name == "compression") for r in sweep.runs)
    recall = [r for r in sweep.runs if r.cfg.task.name.endswith("recall")]
    assert all(r.cfg.task.train[0].training and "training" not in r.cfg.task.test[0] for r in recall)


def test_claim_seeds_reuses_the_committed_runs_of_the_claim_cell():
    """Seed 0 of sweeps/gatedfwa_claim_seeds.yaml is the grid's own runs, seeds 1 and 2 the committed runs of the
    claim cell (same ids), so the sweep's header, which starts from those records, skips them instead of training
    them again: all 24 runs are committed, so it trains nothing."""
    sweep = load_sweep(SWEEPS / "gatedfwa_claim_seeds.yaml")
    assert len(sweep.runs) == 24
    grid = {r.id: r.cfg for r in load_sweep(SWEEPS / "mqar.yaml").runs}
    seed0 = {r.id for r in sweep.runs if r.cfg.seed == 0}
    assert len(seed0) == 8 and seed0 <= set(grid)
    assert {(grid[i].model.mixer, grid[i].task.params.input_seq_len, grid[i].model.d_model) for i in seed0} == {
        ("gatedfwa", 512, 64), ("mamba", 512, 64)}
    results = Path(__file__).parents[2] / "results"
    fidelity = [json.loads(line) for name in ("h100_claim_cell_seed1.jsonl", "h100_claim_cell_seeds.jsonl")
                for line in (results / "fidelity" / name).read_text().splitlines()]
    committed = {json.loads(line)["id"] for line in (results / "mqar" / "results.jsonl").read_text().splitlines()}
    committed |= {r["id"] for r in fidelity}
    assert {r.id for r in sweep.runs} <= committed
    assert {r["seed"] for r in fidelity} == {1, 2} and len({r["id"] for r in fidelity}) == len(fidelity) == 16
