"""The leaderboard picks the best learning rate per cell, pivots, and draws the recall grid."""
import json

import pandas as pd
import pytest

from zoo.leaderboard import leaderboard, main as leaderboard_main, markdown, pivot


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
    assert "expected a folder with results.jsonl" in capsys.readouterr().err


def test_cli_says_when_a_sweep_has_no_finished_run_yet(tmp_path, capsys):
    for run_id in ("a1", "b2"):
        (tmp_path / "runs" / run_id).mkdir(parents=True)
    assert leaderboard_main([str(tmp_path)]) == 2
    assert "no run has finished yet (2 started" in capsys.readouterr().err


def run(id, mixer="softmax", lr=1e-3, seed=0, acc=0.5, kv=4, n=64, wd=0.1, task="mqar", status="completed", d=32):
    settings = {"task.name": task, "model.mixer": mixer, "model.d_model": d, "train.lr": lr, "seed": seed,
                "task.params.num_kv_pairs": kv, "task.params.input_seq_len": n, "train.weight_decay": wd,
                "train.progress_bar": False}
    return {"id": id, "task": task, "mixer": mixer, "seq_len": n, "d_model": d, "lr": lr, "seed": seed,
            "accuracy": acc, "seq_accuracy": acc, "status": status, "settings": settings}


def test_cells_keep_apart_every_varied_setting_but_lr_and_seed():
    board = leaderboard([run("a", kv=1, acc=0.9), run("b", kv=4, acc=0.3),
                         run("c", kv=4, wd=0.0, acc=0.6), run("d", kv=4, wd=0.0, acc=0.7, lr=1e-2)])
    assert {"num_kv_pairs", "train.weight_decay"} <= set(board.columns)
    assert "train.progress_bar" not in board.columns and "input_seq_len" not in board.columns
    cells = {(r.num_kv_pairs, r["train.weight_decay"]): (r.accuracy, r.lr) for _, r in board.iterrows()}
    assert cells == {(1, 0.1): (0.9, 1e-3), (4, 0.1): (0.3, 1e-3), (4, 0.0): (0.7, 1e-2)}


def test_seeds_are_averaged_and_lr_picked_on_the_mean():
    board = leaderboard([run("a", lr=1e-3, seed=0, acc=1.0), run("b", lr=1e-3, seed=1, acc=0.2),
                         run("c", lr=1e-2, seed=0, acc=0.7), run("d", lr=1e-2, seed=1, acc=0.7),
                         run("e", lr=1e-2, seed=2, acc=0.7, status="failed")])
    (cell,) = board.itertuples()
    assert cell.lr == 1e-2 and cell.accuracy == pytest.approx(0.7) and cell.seeds == 2 and cell.runs == 4
    assert cell.lrs == 2  # the failed run's lr counts only through its finished seeds
    assert cell.accuracy_std == pytest.approx(0.0)


def test_s5_cells_are_kept_apart_by_training_length():
    board = leaderboard([run(str(n), task="s5", n=n, acc=n / 100) for n in (16, 32, 64)])
    assert sorted(board.seq_len) == [16, 32, 64]


def test_recall_grid_is_readable():
    from zoo.leaderboard import recall_grid
    from zoo.plotstyle import mixer_colour

    records = [run(f"{m}{d}{s}{kv}", mixer=m, seed=s, kv=kv, d=d, acc=0.5 + s / 10) for m in ("swa", "softmax")
               for d in (16, 32) for s in (0, 1) for kv in (2, 4)]
    fig = recall_grid(leaderboard(records))
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert sorted(ax.get_title() for ax in axes) == ["mqar, N=64, kv=2", "mqar, N=64, kv=4"]
    ax = axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32"]
    assert "seeds" in ax.get_ylabel()
    colours = {bars.get_label(): bars.lines[0].get_color() for bars in ax.containers}
    assert colours == {"softmax": mixer_colour("softmax"), "swa": mixer_colour("swa")}
    assert all(len(bars.lines[2]) == 1 for bars in ax.containers)  # error bars over seeds


def test_model_variants_are_rows_and_empty_mappings_no_column():
    def variant(id, acc, mixer="gatedfwa", **kwargs):
        r = run(id, mixer=mixer, acc=acc)
        r["settings"] = {**r["settings"], "model.mixer_kwargs": "{}"} if not kwargs else {
            **r["settings"], **{f"model.mixer_kwargs.{k}": v for k, v in kwargs.items()}}
        return r

    board = leaderboard([variant("a", 0.9, variant="paper"), variant("b", 0.6, variant="paper", decay=False),
                         variant("c", 0.8, mixer="swa")])
    assert "model.mixer_kwargs" not in board.columns  # swa's {} is no setting of its own
    table = pivot(board)
    assert table.index.names == ["task", "mixer", "setup"] and list(table.columns.names) == ["seq_len", "d_model"]
    assert list(table.index.get_level_values("setup")) == ["variant=paper", "-", "decay=False variant=paper"]
    assert table.loc[("mqar", "gatedfwa", "decay=False variant=paper"), ("mean", "")] == 0.6


def test_recall_grid_legend_names_only_what_tells_lines_apart():
    """The training segments follow N (one value per panel): not in the legend nor a pivot header; a mixer kwarg
    that varies within a panel is in the legend, short."""
    from zoo.leaderboard import recall_grid

    records = []
    for n in (16, 64):
        for i, negative in enumerate((None, True)):
            r = run(f"{n}{i}", mixer="deltanet", n=n, acc=0.5 + i / 4)
            r["settings"] = {**r["settings"], "task.train": f'[{{"input_seq_len": {n}}}]'}
            if negative:
                r["settings"]["model.mixer_kwargs.negative_eigenvalues"] = True
            records.append(r)
    board = leaderboard(records)
    fig = recall_grid(board)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sorted(labels) == ["deltanet", "deltanet, negative_eigenvalues=True"]
    assert pivot(board).columns.names == ["seq_len", "d_model"]  # task.train follows N: no header row of its own


def test_cells_with_fewer_finished_lrs_are_listed_and_drawn_hollow(tmp_path, capsys):
    """A sweep under way: the cell with fewer learning rates finished than the task's fullest cell is partial
    (its best may still rise); the printout names it and the recall grid draws its point hollow."""
    from zoo.leaderboard import partial, recall_grid

    full = [run(f"{m}{d}{lr}", mixer=m, d=d, lr=lr, acc=0.5) for m in ("softmax", "swa") for d in (16, 32)
            for lr in (1e-3, 1e-2)]
    records = [r for r in full if not (r["mixer"] == "swa" and r["d_model"] == 32 and r["lr"] == 1e-2)]
    board = leaderboard(records)
    assert sorted(board.lrs) == [1, 2, 2, 2]
    assert list(board[partial(board)][["mixer", "d_model"]].itertuples(index=False, name=None)) == [("swa", 32)]

    def hollow(fig):
        return [(line.get_xdata()[i], line.get_markeredgecolor()) for ax in fig.axes for line in ax.lines
                if line.get_markerfacecolor() == "white" for i in range(len(line.get_xdata()))]

    def legend(fig):
        return [t.get_text() for t in fig.legends[0].get_texts()]

    from zoo.plotstyle import mixer_colour

    fig = recall_grid(board)
    assert hollow(fig) == [(32, mixer_colour("swa"))]
    assert "not every lr finished yet" in legend(fig)
    fig = recall_grid(leaderboard(full))
    assert hollow(fig) == [] and "not every lr finished yet" not in legend(fig)

    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert leaderboard_main([str(tmp_path)]) == 0
    assert "(the best may still rise): swa N=64 d=32 (1 of 2 lrs)\n" in capsys.readouterr().out


def test_markdown_table_marks_partial_cells_seeds_and_missing_ones(tmp_path, capsys):
    """The README table: per mixer and cell the best lr's accuracy (mean over seeds, ± std where several, * where
    the cell is partial), the lr and the epochs; - where a mixer has no finished run in the cell."""
    def ran(*args, epochs=5, **kwargs):
        return {**run(*args, **kwargs), "epochs": epochs}

    records = [ran("a", d=16, lr=1e-3, acc=0.5), ran("b", d=16, lr=4.6416e-4, acc=0.9, epochs=12),
               ran("c", d=32, lr=1e-3, seed=0, acc=0.8), ran("d", d=32, lr=1e-3, seed=1, acc=0.6, epochs=8),
               ran("e", d=32, lr=4.6416e-4, acc=0.1), ran("f", mixer="swa", d=16, lr=1e-2, acc=0.4, epochs=64)]
    expected = ("| mixer | N=64, d=16 | N=64, d=32 |\n"
                "|---|---|---|\n"
                "| softmax | 0.900 (4.6e-4, 12) | 0.700 ± 0.141 (1e-3, 6.5) |\n"
                "| swa | 0.400* (1e-2, 64) | - |\n")
    assert markdown(leaderboard(records)) == expected
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert leaderboard_main([str(tmp_path), "--markdown", str(tmp_path / "table.md")]) == 0
    assert (tmp_path / "table.md").read_text() == expected
    assert f"markdown table: {tmp_path / 'table.md'}" in capsys.readouterr().out
    for flag in ("--out", "--plot", "--markdown"):  # a path in a missing folder: refused before anything is written
        assert leaderboard_main([str(tmp_path), flag, str(tmp_path / "missing" / "x")]) == 2
        assert f"error: {flag}=" in capsys.readouterr().err
