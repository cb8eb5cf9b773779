"""python -m zoo.leaderboard <dir> --figure pareto|length|mad on small synthetic results files."""
import json

import pandas as pd
import pytest
from omegaconf import OmegaConf

from zoo.figures import curves_frame, label_mixers, length_frame, mad_scores, pareto_frontier, segment_lengths
from zoo.leaderboard import main as leaderboard_main
from zoo.results import latest_records


def write_results(folder, records, configs=()):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    for run_id, cfg in configs:
        (folder / "runs" / run_id).mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(cfg), folder / "runs" / run_id / "config.yaml")


def test_pareto_frontier_keeps_only_undominated_points():
    points = pd.DataFrame({"state_size": [64, 64, 128, 256, 256, 512, 1024],
                           "accuracy": [0.2, 0.5, 0.4, 0.7, 0.6, 0.7, 0.9]})
    front = pareto_frontier(points)
    assert list(zip(front["state_size"], front["accuracy"])) == [(64, 0.5), (256, 0.7), (1024, 0.9)]


def test_pareto_figure(tmp_path):
    records = [{"id": f"r{i}", "task": "mqar", "mixer": m, "seq_len": n, "d_model": d, "accuracy": a,
                "state_size": s} for i, (m, n, d, a, s) in enumerate([
                    ("based", 256, 64, 0.3, 4096), ("based", 256, 128, 0.8, 16384), ("mamba", 256, 64, 0.2, 2048),
                    ("softmax", 256, 64, 1.0, 65536), ("based", 512, 64, 0.1, 4096), ("gla", 512, 64, 0.4, 8192)])]
    records.append({"id": "x", "status": "failed", "mixer": "gla"})
    write_results(tmp_path, records)
    assert leaderboard_main([str(tmp_path), "--figure", "pareto"]) == 0
    assert (tmp_path / "pareto.png").stat().st_size > 0 and (tmp_path / "pareto.pdf").read_bytes()[:4] == b"%PDF"


def test_segment_lengths_correct_for_chance_and_average_one_length():
    accs = {"N64": 0.75, "N128_kv8": 0.5, "N128_kv16": 0.3, "N256_1": 0.25, "other": 1.0}
    assert segment_lengths(accs, None) == {64: 0.75, 128: 0.4, 256: 0.25}
    chance = {"N64": 0.5, "N128_kv8": 0.5, "N128_kv16": 0.5, "N256_1": 0.25}
    assert segment_lengths(accs, chance) == pytest.approx({64: 0.5, 128: -0.2, 256: 0.0})


def length_records():
    def run(run_id, mixer, acc, per_length, chance=None):
        record = {"id": run_id, "task": "parity", "mixer": mixer, "accuracy": acc, "seq_len": 256,
                  "task_params": {"input_seq_len": 64, "final_only": False},
                  "segment_accuracy": {f"N{n}": a for n, a in per_length.items()}}
        if chance:
            record["segment_chance"] = {f"N{n}": chance for n in per_length}
        return record

    return [run("a", "mamba", 0.9, {64: 1.0, 128: 0.9, 256: 0.8}, 0.5),
            run("b", "mamba", 0.6, {64: 0.7, 128: 0.6, 256: 0.5}, 0.5),
            run("c", "softmax", 0.7, {64: 1.0, 128: 0.6, 256: 0.5}, 0.5)]


def test_length_figure_uses_best_run_and_training_lengths_from_configs(tmp_path):
    records = length_records()
    config = {"task": {"name": "parity", "params": {"final_only": False},
                       "train": [{"num_examples": 10, "input_seq_len": 32}, {"num_examples": 10, "input_seq_len": 64}]}}
    write_results(tmp_path, records, [("a", config)])
    frame = length_frame(latest_records(tmp_path), tmp_path)
    a = frame[frame["id"] == "a"]
    assert list(a["length"]) == [64, 128, 256] and list(a["accuracy"]) == pytest.approx([1.0, 0.8, 0.6])
    assert a["train_lengths"].iloc[0] == (32, 64) and frame[frame["id"] == "c"]["train_lengths"].iloc[0] == (64,)
    assert leaderboard_main([str(tmp_path), "--figure", "length"]) == 0
    assert (tmp_path / "length.png").exists() and (tmp_path / "length.pdf").exists()


def test_length_figure_needs_segments(tmp_path, capsys):
    write_results(tmp_path, [{"id": "a", "task": "mqar", "mixer": "swa", "accuracy": 0.5}])
    assert leaderboard_main([str(tmp_path), "--figure", "length"]) == 2
    assert "segment_accuracy" in capsys.readouterr().err


def mad_records():
    """Two mixers; task A has two settings (the baseline and a smaller training set), task B one."""
    rows = [  # mixer, task, num_train_examples, lr, wd, final accuracy
        ("softmax", "A", 100, 1e-3, 0.0, 0.9), ("softmax", "A", 100, 1e-4, 0.1, 0.7),
        ("softmax", "A", 50, 1e-3, 0.0, 0.5), ("softmax", "A", 50, 1e-4, 0.1, 0.6),
        ("softmax", "B", 100, 1e-3, 0.0, 0.2), ("softmax", "B", 100, 1e-4, 0.0, 0.4),
        ("mamba", "A", 100, 1e-3, 0.0, 0.8), ("mamba", "A", 50, 1e-3, 0.0, 0.8),
        ("mamba", "B", 100, 1e-3, 0.0, 1.0),
    ]
    return [{"id": f"r{i}", "mixer": m, "task": t, "lr": lr, "weight_decay": wd, "accuracy": 1.0,
             "final_accuracy": acc, "task_params": {"vocab_size": 16}, "num_train_examples": n}
            for i, (m, t, n, lr, wd, acc) in enumerate(rows)]


def test_mad_scores_best_per_setting_then_mean(tmp_path):
    table = mad_scores(mad_records(), tmp_path)
    assert list(table.index) == ["mamba", "softmax"]
    assert table.loc["softmax", "A"] == pytest.approx((0.9 + 0.6) / 2) and table.loc["softmax", "B"] == 0.4
    assert table.loc["softmax", "MAD score"] == pytest.approx((0.75 + 0.4) / 2)
    assert table.loc["mamba", "MAD score"] == pytest.approx(0.9) and table.loc["mamba", "settings"] == 3


def test_mad_scores_use_mads_macro_accuracy_when_recorded(tmp_path):
    records = mad_records()
    for r in records:
        r["final_macro_accuracy"] = r["final_accuracy"] / 2
    table = mad_scores(records, tmp_path)
    assert table.loc["mamba", "MAD score"] == pytest.approx(0.45) and table.loc["softmax", "B"] == pytest.approx(0.2)


def test_mad_figure(tmp_path):
    write_results(tmp_path, mad_records())
    assert leaderboard_main([str(tmp_path), "--figure", "mad"]) == 0
    for name in ("mad.png", "mad.pdf", "mad_scores.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert pd.read_csv(tmp_path / "mad_scores.csv", index_col=0).loc["softmax", "B"] == 0.4


def test_mixers_with_different_kwargs_get_their_own_label(tmp_path):
    records = [{"id": "a", "mixer": "deltanet", "mixer_kwargs": {"negative_eigenvalues": True, "num_heads": 2}},
               {"id": "b", "mixer": "deltanet", "mixer_kwargs": {"num_heads": 2}},
               {"id": "c", "mixer": "mamba"}]
    write_results(tmp_path, [], [("c", {"model": {"mixer_kwargs": {"d_state": 16}}})])
    assert [r["label"] for r in label_mixers(records, tmp_path)] == [
        "deltanet negative_eigenvalues=True", "deltanet", "mamba"]


def curve_record(run_id, mixer, lr, seed, accs):
    return {"id": run_id, "task": "mqar", "mixer": mixer, "seq_len": 512, "d_model": 64, "lr": lr, "seed": seed,
            "accuracy": accs[-1], "history": [{"epoch": e, "test/acc": a} for e, a in enumerate(accs)]}


def test_curves_frame_has_a_row_per_run_and_epoch_counted_from_one():
    records = [curve_record("a", "gatedfwa", 1e-3, 0, [0.1, 0.76, 0.76]), curve_record("b", "mamba", 1e-3, 1, [0.2]),
               {"id": "c", "task": "mqar", "mixer": "mamba", "status": "failed"}]
    frame = curves_frame(records)
    assert list(zip(frame["id"], frame["epoch"], frame["accuracy"])) == [("a", 1, 0.1), ("a", 2, 0.76),
                                                                        ("a", 3, 0.76), ("b", 1, 0.2)]


def test_curves_figure_and_its_error_without_histories(tmp_path):
    records = [curve_record(f"r{i}", mixer, lr, seed, [0.0, 0.5 * seed, 0.76])
               for i, (mixer, lr, seed) in enumerate([(m, lr, s) for m in ("gatedfwa", "mamba")
                                                      for lr in (1e-4, 1e-2) for s in (0, 1)])]
    write_results(tmp_path / "ok", records)
    assert leaderboard_main([str(tmp_path / "ok"), "--figure", "curves"]) == 0
    assert (tmp_path / "ok" / "curves.png").stat().st_size > 0
    write_results(tmp_path / "none", [{**r, "history": []} for r in records])
    assert leaderboard_main([str(tmp_path / "none"), "--figure", "curves"]) == 2
    assert not (tmp_path / "none" / "curves.png").exists()
