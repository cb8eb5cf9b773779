"""Leaderboard of a sweep: best accuracy over learning rates per (task, mixer, N, d_model).

    python -m zoo.leaderboard <sweep dir> [--out leaderboard.csv] [--plot recall_grid.png]

Writes the CSV (one row per cell), prints a pivot table (mixers x (N, d_model), sorted by mean
accuracy) and draws a recall grid like Zoology's figure 2: accuracy against d_model, one panel per
N, one line per mixer.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from zoo.results import latest_records

CELL = ["task", "mixer", "seq_len", "d_model"]
COLUMNS = CELL + ["accuracy", "seq_accuracy", "lr", "params", "state_size", "epochs", "wall_seconds",
                  "seconds_per_epoch", "runs", "status"]


def runs_frame(records: list[dict]) -> pd.DataFrame:
    """One row per run that produced validation metrics (diverged runs count with what they reached)."""
    rows = [r for r in records if r.get("accuracy") is not None]
    keep = CELL + ["accuracy", "seq_accuracy", "lr", "params", "state_size", "epochs", "wall_seconds",
                   "seconds_per_epoch", "status", "id"]
    return pd.DataFrame([{k: r.get(k) for k in keep} for r in rows], columns=keep)


def leaderboard(records: list[dict]) -> pd.DataFrame:
    """Best run over learning rates for every (task, mixer, N, d_model) cell."""
    runs = runs_frame(records)
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS)
    best = runs.loc[runs.groupby(CELL)["accuracy"].idxmax()].copy()
    best["runs"] = runs.groupby(CELL)["accuracy"].transform("size").loc[best.index]
    return best[COLUMNS].sort_values(CELL).reset_index(drop=True)


def pivot(board: pd.DataFrame) -> pd.DataFrame:
    """Mixers x (N, d_model) accuracy, with a mean column; best mixer first."""
    table = board.pivot_table(index=["task", "mixer"], columns=["seq_len", "d_model"], values="accuracy")
    table[("mean", "")] = table.mean(axis=1)
    return table.sort_values(("mean", ""), ascending=False)


def plot_recall_grid(board: pd.DataFrame, path: Path) -> None:
    """Accuracy vs d_model: a row of panels per task, a panel per N, a line per mixer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted(board["task"].unique())
    lengths = sorted(board["seq_len"].unique())
    colour = {m: f"C{i % 10}" for i, m in enumerate(sorted(board["mixer"].unique()))}  # same colour in every panel
    fig, axes = plt.subplots(len(tasks), len(lengths), figsize=(max(6.0, 4 * len(lengths)), 3.2 * len(tasks) + 0.8),
                             squeeze=False, sharey=True)
    for row, task in enumerate(tasks):
        for col, n in enumerate(lengths):
            ax = axes[row][col]
            cell = board[(board["task"] == task) & (board["seq_len"] == n)]
            for mixer, group in cell.groupby("mixer"):
                group = group.sort_values("d_model")
                ax.plot(group["d_model"], group["accuracy"], marker="o", label=mixer, color=colour[mixer])
            ax.set_xscale("log", base=2)
            ax.set_title(f"{task}, N={n}")
            ax.set_xlabel("model dimension")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        axes[row][0].set_ylabel("accuracy")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes.flat:  # a mixer missing from the first panel still gets a legend entry
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    ncol = min(len(labels), 3 * len(lengths))
    rows = -(-len(labels) // ncol)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False)
    fig.tight_layout(rect=(0, 0.07 * rows / len(tasks), 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_and_save(sweep_dir: Path, csv_path: Path | None = None, png_path: Path | None = None) -> pd.DataFrame:
    """Build the leaderboard of ``sweep_dir``, write CSV and PNG, print the pivot table."""
    sweep_dir = Path(sweep_dir)
    board = leaderboard(latest_records(sweep_dir))
    if board.empty:
        print(f"no results with accuracy yet in {sweep_dir}")
        return board
    csv_path = Path(csv_path or sweep_dir / "leaderboard.csv")
    png_path = Path(png_path or sweep_dir / "recall_grid.png")
    board.to_csv(csv_path, index=False)
    plot_recall_grid(board, png_path)
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.float_format", "{:.3f}".format):
        print(pivot(board))
    print(f"leaderboard: {csv_path}\nrecall grid: {png_path}")
    return board


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.leaderboard", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", help="a sweep's output folder (holds results.jsonl)")
    parser.add_argument("--out", help="CSV path (default <sweep_dir>/leaderboard.csv)")
    parser.add_argument("--plot", help="PNG path (default <sweep_dir>/recall_grid.png)")
    parser.add_argument("--figure", choices=("pareto", "length", "mad"),
                        help="draw only this figure (zoo.figures) as <sweep_dir>/<figure>.png and .pdf")
    args = parser.parse_args(argv)
    if not (Path(args.sweep_dir) / "results.jsonl").exists():
        print(f"error: sweep_dir={args.sweep_dir!r} is not valid: expected a folder with results.jsonl",
              file=sys.stderr)
        return 2
    if args.figure:
        from zoo.figures import draw

        try:
            paths = draw(args.figure, Path(args.sweep_dir))
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print("\n".join(map(str, paths)))
        return 0
    print_and_save(Path(args.sweep_dir), args.out and Path(args.out), args.plot and Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
