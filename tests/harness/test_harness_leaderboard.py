"""The leaderboard picks the best learning rate per cell, pivots, and draws the recall grid."""
import json

import pandas as pd

from zoo.leaderboard import leaderboard, main as leaderboard_main, pivot


def record(id, mixer, n, d, lr, acc, status="completed"):
    return {"id": id, "task": "mqar", "mixer": mixer, "seq_len": n, "d_model": d, "lr": lr, "accuracy": acc,
            "seq_accuracy": acc / 2, "params": d * 100, "state_size": n * d, "epochs": 3, "wall_seconds": 1.0,
            "seconds_per_epoch": 0.3, "status": status}


RECORDS = [
    record("a", "softmax", 64, 32, 1e-3, 0.50), record("b", "softmax", 64, 32, 1e-2, 0.90),
    record("c", "swa", 64, 32, 1e-3, 0.40), record("d", "swa", 64, 32, 1e-2, 0.20),
    record("e", "softmax", 128, 32, 1e-3, 0.70), record("f", "swa", 128, 32, 1e-3, 0.10),
    {"id": "g", "status": "failed", "mixer": "swa", "error": "boom"},  # no accuracy: left out
    record("c", "swa", 64, 32, 1e-3, 0.45),  # a newer record of run c replaces the old one
]


def test_best_lr_per_cell(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    from zoo.results import latest_records

    board = leaderboard(latest_records(tmp_path))
    assert len(board) == 4
    cell = board[(board.mixer == "softmax") & (board.seq_len == 64)].iloc[0]
    assert cell.accuracy == 0.90 and cell.lr == 1e-2 and cell.runs == 2
    swa = board[(board.mixer == "swa") & (board.seq_len == 64)].iloc[0]
    assert swa.accuracy == 0.45 and swa.lr == 1e-3
    table = pivot(board)
    assert list(table.index.get_level_values("mixer")) == ["softmax", "swa"]  # best mean first
    assert table.loc[("mqar", "softmax"), ("mean", "")] == (0.90 + 0.70) / 2


def test_cli_writes_csv_and_png(tmp_path, capsys):
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    csv, png = tmp_path / "board.csv", tmp_path / "grid.png"
    assert leaderboard_main([str(tmp_path), "--out", str(csv), "--plot", str(png)]) == 0
    assert pd.read_csv(csv).shape[0] == 4
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "softmax" in capsys.readouterr().out
    assert leaderboard_main([str(tmp_path / "missing")]) == 2
