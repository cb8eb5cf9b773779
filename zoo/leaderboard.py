"""Leaderboard of a sweep: one cell per distinct setting, the best learning rate, seeds averaged.

    python -m zoo.leaderboard <sweep dir> [--out leaderboard.csv] [--plot recall_grid.png] [--markdown table.md]

A cell is every setting the sweep varied except the learning rate and the seed: task, mixer,
training length N, d_model, and any other key that differs between runs (``num_kv_pairs``,
``train.weight_decay``, ...; one CSV column each). Within a cell, the accuracy of each learning
rate is averaged over its seeds (mean, sample std, n) and the learning rate with the best mean is
kept. Only finished runs count (``zoo.results.final_records``): completed, diverged and timed-out
runs with what they reached; failed runs are left out. ``lrs`` counts a cell's learning rates with a
finished run; a cell with fewer than the fullest cell of its task (a sweep still under way) is
*partial*: its best may still rise, so the printout lists it and the recall grid draws it hollow.

Writes the CSV (one row per cell), prints a pivot table (mixers x cells, best mean first; ``--markdown`` also
writes it as a Markdown table with each cell's lr and epochs, for a README) and draws
a recall grid like Zoology's figure 2: accuracy against d_model with error bars over seeds, one
panel per task setting (N, kv, ...), one line per mixer in that mixer's colour in every figure.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from zoo.figures import FIGURES, draw
from zoo.results import FINAL, final_records

CELL = ["task", "mixer", "seq_len", "d_model"]
METRICS = ["accuracy", "seq_accuracy", "params", "state_size", "epochs", "wall_seconds", "seconds_per_epoch"]
# Keys that name the cell's fixed columns, that are maximised or averaged over, or that do not
# change what a run learns: never a reason to keep two runs apart.
NOT_SETTINGS = {"task.name", "model.mixer", "model.d_model", "task.params.input_seq_len", "train.lr", "seed",
                "train.progress_bar", "train.loggers", "train.timeout", "train.checkpoint", "imports"}
SHORT = {"num_kv_pairs": "kv", "input_seq_len": "N", "seq_len": "N", "d_model": "d"}  # in titles and heads


def _column(key: str) -> str:
    """``task.params.num_kv_pairs`` -> ``num_kv_pairs``; other keys keep their dotted name."""
    return key.removeprefix("task.params.")


def with_settings(record: dict, sweep_dir: Path | None = None) -> dict:
    """``record`` with ``settings`` (every config key, flattened): from the record, else from the run's
    config.yaml, else from the summary fields the record has."""
    if "settings" in record:
        return record
    path = sweep_dir / "runs" / record["id"] / "config.yaml" if sweep_dir else None
    if path is not None and path.exists():
        from omegaconf import OmegaConf

        from zoo.config import plain, record_fields
        from zoo.spec import run_spec

        run = plain(OmegaConf.load(path))
        return {**record, **record_fields(run, run_spec(run))}
    known = {"task.name": record.get("task"), "model.mixer": record.get("mixer"),
             "model.d_model": record.get("d_model"), "train.lr": record.get("lr"), "seed": record.get("seed")}
    return {**record, "settings": known}


def runs_frame(records: list[dict]) -> tuple[pd.DataFrame, list[str]]:
    """One row per finished run that produced test metrics; and the varying setting columns."""
    rows = [r for r in records if r.get("status") in FINAL and r.get("accuracy") is not None]
    # an empty mapping (mixer_kwargs: {}) sets nothing: as a key of its own it would only split a column in two
    settings = [{k: v for k, v in with_settings(r)["settings"].items() if v != "{}"} for r in rows]
    keys = sorted({k for s in settings for k in s} - NOT_SETTINGS)
    varying = [k for k in keys if len({repr(s.get(k)) for s in settings}) > 1]
    frame = pd.DataFrame([{**{c: r.get(c) for c in CELL + ["lr", "seed", "status", "id"] + METRICS},
                           **{_column(k): "-" if s.get(k) is None else s.get(k) for k in varying}}
                          for r, s in zip(rows, settings)],
                         columns=CELL + ["lr", "seed", "status", "id"] + METRICS + [_column(k) for k in varying])
    return frame, [_column(k) for k in varying]


def leaderboard(records: list[dict]) -> pd.DataFrame:
    """Per cell: the learning rate with the best accuracy averaged over seeds; mean, std and n."""
    runs, extra = runs_frame(records)
    keys = CELL + extra
    columns = keys + ["accuracy", "accuracy_std", "seeds", "seq_accuracy", "lr", "params", "state_size", "epochs",
                      "wall_seconds", "seconds_per_epoch", "runs", "lrs", "status"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    runs["seed"] = runs["seed"].fillna(-1)
    per_lr = runs.groupby(keys + ["lr"], dropna=False, sort=True).agg(
        accuracy=("accuracy", "mean"), accuracy_std=("accuracy", "std"), seeds=("accuracy", "size"),
        seq_accuracy=("seq_accuracy", "mean"), params=("params", "first"), state_size=("state_size", "first"),
        epochs=("epochs", "mean"), wall_seconds=("wall_seconds", "mean"),
        seconds_per_epoch=("seconds_per_epoch", "mean"),
        status=("status", lambda s: ", ".join(f"{n} {v}" for v, n in s.value_counts().sort_index().items())),
    ).reset_index()
    cells = per_lr.groupby(keys, dropna=False, sort=True)
    per_lr["runs"] = cells["seeds"].transform("sum")
    per_lr["lrs"] = cells["lr"].transform("size")  # per_lr has one row per learning rate of the cell
    best = per_lr.loc[cells["accuracy"].idxmax()]
    return best[columns].reset_index(drop=True)


def fullest_lrs(board: pd.DataFrame) -> pd.Series:
    """Per row of ``board``: the most learning rates any cell of its task has finished."""
    return board.groupby("task")["lrs"].transform("max")


def partial(board: pd.DataFrame) -> pd.Series:
    """Per row of ``board``: True where the cell has fewer learning rates finished than the fullest cell of its
    task (a sweep still under way; that cell's best may still rise)."""
    return board["lrs"] < fullest_lrs(board)


def _setup(row) -> str:
    """The settings a row differs in, short (``model.`` and ``mixer_kwargs.`` dropped, unset ones left out):
    ``init=mixer variant=paper decay=False``; ``-`` if none. ``row``: a Series or a dict, key -> value."""
    named = [f"{k.removeprefix('model.').removeprefix('mixer_kwargs.')}={v}" for k, v in row.items() if v != "-"]
    return " ".join(named) or "-"


def _setting_columns(board: pd.DataFrame, exclude) -> list[str]:
    """The board's setting columns (those before ``accuracy``) other than ``exclude``."""
    return [c for c in board.columns[: list(board.columns).index("accuracy")] if c not in exclude]


def _layout(board: pd.DataFrame) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The board with a ``setup`` column where needed, the pivot's row keys and its column keys.

    Model settings a sweep varied (``model.mixer_kwargs.*``, ``model.init``, ``model.positions``, ...) describe
    a variant of the mixer, not a cell: they join the row label as one ``setup`` text, so an ablation reads
    as one row per variant instead of one sparse column each."""
    extra = _setting_columns(board, ("task", "mixer"))
    model_keys = [c for c in extra if c.startswith("model.")]
    index = ["task", "mixer"]
    if model_keys:
        board = board.assign(setup=board[model_keys].apply(_setup, axis=1))
        index.append("setup")
        extra = [c for c in extra if c not in model_keys]
    for key in [c for c in extra if c not in ("seq_len", "d_model")]:
        # a setting the other keys determine (S5's training segments follow N) would only repeat them as a header
        others = index + [c for c in extra if c != key]
        if board.groupby(others, dropna=False)[key].agg(lambda v: v.astype(str).nunique()).max() <= 1:
            extra.remove(key)
    return board, index, extra  # extra holds seq_len and d_model at least


def pivot(board: pd.DataFrame) -> pd.DataFrame:
    """Mixers x cells mean accuracy, with a mean column; best mixer first (see ``_layout`` for the rows)."""
    board, index, extra = _layout(board)
    table = board.pivot_table(index=index, columns=extra, values="accuracy")
    table[("mean",) + ("",) * (len(extra) - 1)] = table.mean(axis=1)
    return table.sort_values(table.columns[-1], ascending=False)


def _lr_text(lr: float) -> str:
    """0.00046416 -> ``4.6e-4``, 0.01 -> ``1e-2``."""
    mantissa, exponent = f"{lr:.1e}".split("e")
    return f"{mantissa.removesuffix('.0')}e{int(exponent)}"


def _cell_text(row, is_partial: bool) -> str:
    """``0.990* ± 0.012 (4.6e-4, 53)``: accuracy at the best lr (* partial, ± std over seeds), the lr, the epochs."""
    spread = f" ± {row.accuracy_std:.3f}" if row.seeds > 1 else ""
    epochs = "" if pd.isna(row.epochs) else f", {round(row.epochs, 1):g}"
    return f"{row.accuracy:.3f}{'*' if is_partial else ''}{spread} ({_lr_text(row.lr)}{epochs})"


def markdown(board: pd.DataFrame) -> str:
    """The pivot as a Markdown table, rows in ``pivot``'s order: per cell the best lr's accuracy (mean over seeds),
    ``*`` where the cell is partial, ``± std`` over seeds where there are several, then the lr and the epochs it ran
    (mean over seeds); ``-`` where a mixer has no finished run in that cell. Row keys with one value are left out."""
    order = pivot(board).index
    board, index, extra = _layout(board)
    texts = board.assign(text=[_cell_text(r, p) for r, p in zip(board.itertuples(), partial(board))])
    table = texts.pivot_table(index=index, columns=extra, values="text", aggfunc="first").reindex(order)
    rows = [k for k in index if table.index.get_level_values(k).nunique() > 1] or ["mixer"]
    heads = [", ".join(f"{SHORT.get(k, k)}={v}" for k, v in zip(extra, key)) for key in table.columns]
    lines = ["| " + " | ".join(rows + heads) + " |", "|" + "---|" * (len(rows) + len(heads))]
    for label, values in table.iterrows():
        label = dict(zip(index, label))  # index holds task and mixer at least
        cells = [str(label[k]) for k in rows] + ["-" if pd.isna(v) else v for v in values]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _title(task: str, keys: list[str], values) -> str:
    parts = [task] + [f"{SHORT.get(k, k)}={v}" for k, v in zip(keys, values)]
    return ", ".join(parts)


def plot_recall_grid(board: pd.DataFrame, path: Path) -> None:
    """Draw the recall grid of ``board`` (see ``recall_grid``) into a PNG file."""
    import matplotlib.pyplot as plt

    fig = recall_grid(board)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def recall_grid(board: pd.DataFrame):
    """Accuracy vs d_model: a panel per task setting (N, kv, ...), a line per mixer (and per other
    varying setting, as line styles), error bars over seeds, each mixer in its fixed colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    from zoo.plotstyle import mixer_colour

    board = board.assign(partial=partial(board))
    extra = _setting_columns(board, CELL)
    task_keys = ["seq_len"] + [c for c in extra if "." not in c]  # task parameters have no dot
    panels = list(board.groupby(["task"] + task_keys, sort=True))
    # a setting with one value in every panel (the training segments, which follow N) tells no line apart
    line_keys = [c for c in extra if "." in c and any(cell[c].astype(str).nunique() > 1 for _, cell in panels)]
    ncols = min(len(panels), 4)
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4 * ncols + 0.5, 3.2 * nrows + 0.9), squeeze=False, sharey=True)
    styles = ["-", "--", ":", "-."]
    line_variants = sorted({tuple(v) for v in board[line_keys].itertuples(index=False)},
                           key=lambda v: tuple(map(str, v))) if line_keys else [()]  # values of mixed types
    for ax, ((task, *values), cell) in zip(axes.flat, panels):
        for (mixer, *variant), group in cell.groupby(["mixer"] + line_keys, sort=True):
            group = group.sort_values("d_model")
            setup = _setup(dict(zip(line_keys, variant)))
            label = mixer if setup == "-" else f"{mixer}, {setup}"
            ax.errorbar(group["d_model"], group["accuracy"], yerr=group["accuracy_std"].fillna(0.0), marker="o",
                        capsize=3, label=label, color=mixer_colour(mixer),
                        linestyle=styles[line_variants.index(tuple(variant)) % len(styles)])
            unfinished = group[group["partial"]]
            if len(unfinished):  # hollow markers drawn over the filled ones
                ax.plot(unfinished["d_model"], unfinished["accuracy"], linestyle="none", marker="o",
                        markerfacecolor="white", markeredgecolor=mixer_colour(mixer), zorder=3)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(cell["d_model"].unique()))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(_title(task, task_keys, values))
        ax.set_xlabel("model dimension")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("accuracy (best lr,\nmean ± std over seeds)")
    handles, labels = [], []
    for ax in axes.flat:  # a mixer missing from the first panel still gets a legend entry
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if board["partial"].any():
        handles.append(Line2D([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="grey"))
        labels.append("not every lr finished yet")
    # as many legend columns as the labels' length lets fit across the figure, and the figure grows by the
    # legend's rows, so an ablation's long labels neither run off the page nor squash the panels
    width, height = fig.get_size_inches()
    ncol = max(1, min(len(labels), 3 * ncols, int(width * 11) // (max(map(len, labels)) + 6)))
    legend_height = 0.22 * -(-len(labels) // ncol) + 0.15
    fig.set_size_inches(width, height + legend_height)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False)
    fig.tight_layout(rect=(0, legend_height / (height + legend_height), 1, 1))
    return fig


def load_records(sweep_dir: Path) -> list[dict]:
    """The finished runs of a sweep folder, each with its full settings."""
    sweep_dir = Path(sweep_dir)
    return [with_settings(r, sweep_dir) for r in final_records(sweep_dir).values()]


def print_and_save(sweep_dir: Path, csv_path: Path | None = None, png_path: Path | None = None,
                   markdown_path: Path | None = None) -> pd.DataFrame:
    """Build the leaderboard of ``sweep_dir``, write CSV and PNG (and the Markdown table if asked), print the pivot."""
    sweep_dir = Path(sweep_dir)
    board = leaderboard(load_records(sweep_dir))
    if board.empty:
        print(f"no finished results with accuracy yet in {sweep_dir}")
        return board
    csv_path = Path(csv_path or sweep_dir / "leaderboard.csv")
    png_path = Path(png_path or sweep_dir / "recall_grid.png")
    board.to_csv(csv_path, index=False)
    plot_recall_grid(board, png_path)
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.float_format", "{:.3f}".format):
        print(pivot(board))
    print("accuracy at the best lr, mean over seeds (std and n in the CSV)")
    unfinished, most = board[partial(board)], fullest_lrs(board)
    if len(unfinished):
        variant = [c for c in _setting_columns(board, CELL) if c.startswith("model.")]  # as the table's setup
        cells = [f"{r.mixer} N={r.seq_len} d={r.d_model}"
                 + ("" if _setup(r[variant]) == "-" else f" {_setup(r[variant])}") + f" ({r.lrs} of {most[i]} lrs)"
                 for i, r in unfinished.iterrows()]
        print("not every learning rate finished yet (the best may still rise): " + ", ".join(cells))
    print(f"leaderboard: {csv_path}\nrecall grid: {png_path}")
    if markdown_path:
        Path(markdown_path).write_text(markdown(board))
        print(f"markdown table: {markdown_path}")
    return board


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.leaderboard", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", help="a sweep's output folder (holds results.jsonl)")
    parser.add_argument("--out", help="CSV path (default <sweep_dir>/leaderboard.csv)")
    parser.add_argument("--plot", help="PNG path (default <sweep_dir>/recall_grid.png)")
    parser.add_argument("--markdown", metavar="PATH", help="also write the best-lr table as Markdown to PATH (for a "
                        "README: accuracy, * partial, ± std over seeds, the lr and the epochs, per mixer and cell)")
    parser.add_argument("--figure", choices=FIGURES,
                        help="draw only this figure (zoo.figures) as <sweep_dir>/<figure>.png and .pdf")
    args = parser.parse_args(argv)
    for flag, path in (("--out", args.out), ("--plot", args.plot), ("--markdown", args.markdown)):
        if path and not Path(path).parent.is_dir():  # before anything is written
            print(f"error: {flag}={path!r} is not valid: expected a file path in an existing folder", file=sys.stderr)
            return 2
    if not (Path(args.sweep_dir) / "results.jsonl").exists():
        runs = Path(args.sweep_dir) / "runs"
        started = sum(1 for d in runs.iterdir() if d.is_dir()) if runs.is_dir() else 0
        why = (f"no run has finished yet ({started} started under {runs}; results.jsonl is written when the first "
               f"one ends)" if started else "expected a folder with results.jsonl")
        print(f"error: sweep_dir={args.sweep_dir!r} is not valid: {why}", file=sys.stderr)
        return 2
    if args.figure:
        try:
            paths = draw(args.figure, Path(args.sweep_dir))
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print("\n".join(map(str, paths)))
        return 0
    print_and_save(Path(args.sweep_dir), args.out and Path(args.out), args.plot and Path(args.plot),
                   args.markdown and Path(args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
