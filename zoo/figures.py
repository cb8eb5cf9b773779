"""Figures of a sweep folder: ``python -m zoo.leaderboard <dir> --figure pareto|length|mad|curves``.

Runs of one mixer with different constructor kwargs are told apart by label (``deltanet`` and
``deltanet negative_eigenvalues=True``, see :func:`label_mixers`).

* ``pareto``: accuracy against recurrent state size, one point per run, and each mixer's Pareto frontier
  (the best accuracy reached with at most that much state), a panel per (task, N): the BASED paper's figure,
  from any MQAR sweep.
* ``length``: accuracy against test length, a line per mixer (its best run by accuracy), the training
  lengths marked; a panel per task setting and longest training length. Accuracy is chance-corrected,
  ``(acc - chance) / (1 - chance)``, where runs record ``segment_chance``; lengths are read from segment
  names (``N<length>...``), and segments of one length are averaged.
* ``mad``: the MAD score table: per setting (task, its parameters, training set size) the best run over
  learning rates and weight decays, scored by its final accuracy (MAD scores the model at the end of
  training); per task the mean over its settings; the MAD score is the mean over tasks, as MAD's
  benchmark prints it.
* ``curves``: test accuracy after each epoch, a line per run (colour: learning rate, line style: seed), a panel
  per (task, N, d_model, mixer): where runs stall, on which plateau, and how seeds and lrs spread.

Each writes ``<dir>/<figure>.png`` and ``.pdf`` (``mad`` also ``mad_scores.csv``). Runs are the newest record
per id of ``<dir>/results.jsonl``; a run's training segments come from ``<dir>/runs/<id>/config.yaml``
when it exists, else from the record's ``task_params``.
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pandas as pd

from zoo.plotstyle import mixer_colour
from zoo.results import latest_records

FIGURES = ("pareto", "length", "mad", "curves")
_LENGTH = re.compile(r"N(\d+)")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, stem: Path) -> list[Path]:
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    _pyplot().close(fig)
    return paths


def run_config(sweep_dir: Path, record: dict) -> dict | None:
    """The resolved run config of ``record`` as a plain dict, or None when its folder has none."""
    from omegaconf import OmegaConf

    path = Path(sweep_dir) / "runs" / str(record.get("id")) / "config.yaml"
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True) if path.exists() else None


def train_segments(sweep_dir: Path, record: dict) -> list[dict]:
    """The task parameters and ``num_examples`` of each training segment of ``record``'s run."""
    cfg = run_config(sweep_dir, record)
    if cfg is None:
        return [{**record.get("task_params", {}), "num_examples": record.get("num_train_examples")}]
    return [{**cfg["task"]["params"], **segment} for segment in cfg["task"]["train"]]


def label_mixers(records: list[dict], sweep_dir: Path) -> list[dict]:
    """Copies of ``records`` with ``label``: the mixer name, plus ``key=value`` for each constructor kwarg whose
    value differs between runs of that mixer (``deltanet`` and ``deltanet negative_eigenvalues=True``)."""
    kwargs = []
    for r in records:
        cfg = run_config(sweep_dir, r) if "mixer_kwargs" not in r else None
        kwargs.append(r.get("mixer_kwargs") or (cfg or {}).get("model", {}).get("mixer_kwargs", {}))
    by_mixer: dict[str, list[dict]] = {}
    for r, kw in zip(records, kwargs):
        by_mixer.setdefault(r.get("mixer"), []).append(kw)
    varying = {mixer: {key for kw in group for key in kw if any(other.get(key) != kw[key] for other in group)}
               for mixer, group in by_mixer.items()}
    labelled = []
    for r, kw in zip(records, kwargs):
        extra = " ".join(f"{key}={kw[key]}" for key in sorted(varying[r.get("mixer")]) if key in kw)
        labelled.append({**r, "label": f"{r.get('mixer')} {extra}".strip()})
    return labelled


def _panels(n: int, width: float = 4.2, height: float = 3.3):
    plt = _pyplot()
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows + 0.6), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _legend(fig, axes) -> None:
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    fig.legend(entries.values(), entries.keys(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(len(entries), 6), frameon=False)


def pareto_frontier(points: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``points`` (columns ``state_size``, ``accuracy``) that no row with at most as much state
    beats: sorted by state size, each strictly above every smaller one."""
    ordered = points.sort_values(["state_size", "accuracy"], ascending=[True, False])
    best_before = ordered["accuracy"].cummax().shift(fill_value=float("-inf"))
    return ordered[ordered["accuracy"] > best_before]


def draw_pareto(records: list[dict], stem: Path) -> list[Path]:
    """Accuracy against state size (log scale), a point per run, a frontier per mixer, a panel per (task, N)."""
    runs = pd.DataFrame([r for r in records if r.get("accuracy") is not None and r.get("state_size")])
    if runs.empty:
        raise ValueError("no run with both accuracy and state_size")
    if "label" not in runs:
        runs["label"] = runs["mixer"]
    cells = sorted(runs.groupby(["task", "seq_len"]).groups)
    fig, axes = _panels(len(cells))
    for ax, (task, n) in zip(axes, cells):
        cell = runs[(runs["task"] == task) & (runs["seq_len"] == n)]
        for mixer, group in sorted(cell.groupby("label")):
            colour = mixer_colour(mixer)
            ax.scatter(group["state_size"], group["accuracy"], color=colour, alpha=0.35, s=14)
            front = pareto_frontier(group[["state_size", "accuracy"]])
            ax.step(front["state_size"], front["accuracy"], where="post", color=colour, marker="o", ms=4, label=mixer)
        ax.set_xscale("log", base=2)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{task}, N={n}")
        ax.set_xlabel("state size (bytes)")
        ax.set_ylabel("accuracy")
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    fig.tight_layout()
    return _save(fig, stem)


def segment_lengths(segment_accuracy: dict, segment_chance: dict | None) -> dict[int, float]:
    """``{test length: accuracy}`` from ``{segment name: accuracy}``, chance-corrected where a chance is given,
    the segments of one length averaged."""
    by_length: dict[int, list[float]] = {}
    for name, acc in segment_accuracy.items():
        match = _LENGTH.match(name)
        if match is None:
            continue
        if segment_chance and name in segment_chance and segment_chance[name] < 1:
            acc = (acc - segment_chance[name]) / (1 - segment_chance[name])
        by_length.setdefault(int(match.group(1)), []).append(acc)
    return {n: sum(v) / len(v) for n, v in sorted(by_length.items())}


def length_frame(records: list[dict], sweep_dir: Path) -> pd.DataFrame:
    """One row per (run, test length): task, setting, mixer, training lengths, length, accuracy, corrected."""
    rows = []
    for r in records:
        if r.get("accuracy") is None or not r.get("segment_accuracy"):
            continue
        segments = train_segments(sweep_dir, r)
        lengths = tuple(sorted({s["input_seq_len"] for s in segments if "input_seq_len" in s}))
        setting = {k: v for k, v in segments[0].items() if k not in ("input_seq_len", "num_examples", "num_kv_pairs")}
        corrected = bool(r.get("segment_chance"))
        for n, acc in segment_lengths(r["segment_accuracy"], r.get("segment_chance")).items():
            rows.append({"id": r["id"], "task": r["task"], "setting": json.dumps(setting, sort_keys=True),
                         "mixer": r.get("label", r["mixer"]), "train_lengths": lengths, "run_accuracy": r["accuracy"],
                         "length": n, "accuracy": acc, "corrected": corrected})
    return pd.DataFrame(rows)


def draw_length(records: list[dict], stem: Path, sweep_dir: Path) -> list[Path]:
    """Accuracy against test length, a line per mixer's best run, training lengths marked (dotted)."""
    frame = length_frame(records, sweep_dir)
    if frame.empty:
        raise ValueError("no run with per-segment accuracies (segment_accuracy); give the test split several "
                         "segments of different lengths")
    frame["longest"] = frame["train_lengths"].map(lambda t: max(t) if t else 0)
    cells = sorted(frame.groupby(["task", "setting", "longest"]).groups)
    fig, axes = _panels(len(cells))
    for ax, (task, setting, longest) in zip(axes, cells):
        cell = frame[(frame["task"] == task) & (frame["setting"] == setting) & (frame["longest"] == longest)]
        for mixer, group in sorted(cell.groupby("mixer")):
            best = group[group["run_accuracy"] == group["run_accuracy"].max()]
            best = best[best["id"] == best["id"].iloc[0]].sort_values("length")
            ax.plot(best["length"], best["accuracy"], marker="o", color=mixer_colour(mixer), label=mixer)
        for n in sorted({n for t in cell["train_lengths"] for n in t}):
            ax.axvline(n, color="black", linestyle=":", linewidth=1)
        extra = ", ".join(f"{k}={v}" for k, v in json.loads(setting).items() if k not in ("vocab_size",))
        ax.set_title(f"{task} {extra}".strip() + f"\ntrained at N<={longest} (dotted)", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("test length")
        corrected = bool(cell["corrected"].all())
        ax.set_ylabel("accuracy above chance" if corrected else "accuracy")
        ax.set_ylim(-0.05 if corrected else -0.02, 1.02)
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    fig.tight_layout()
    return _save(fig, stem)


def mad_scores(records: list[dict], sweep_dir: Path) -> pd.DataFrame:
    """Mixers x MAD tasks: mean over each task's settings of the best final accuracy over learning rates and
    weight decays, plus ``MAD score`` (mean over tasks); best score first.

    The accuracy is MAD's: the final model's macro-averaged accuracy (``final_macro_accuracy``, see
    ``zoo.evaluation.macro_accuracy``); records written before zoo measured it fall back to the per-token
    accuracy."""
    rows = []
    for r in records:
        accuracy = r.get("final_macro_accuracy", r.get("final_accuracy", r.get("accuracy")))
        if accuracy is None:
            continue
        segments = train_segments(sweep_dir, r)
        setting = json.dumps(segments, sort_keys=True, default=str)
        rows.append({"mixer": r.get("label", r["mixer"]), "task": r["task"], "setting": setting, "accuracy": accuracy})
    runs = pd.DataFrame(rows)
    if runs.empty:
        raise ValueError("no run with an accuracy")
    best = runs.groupby(["mixer", "task", "setting"])["accuracy"].max()
    table = best.groupby(["mixer", "task"]).mean().unstack("task")
    table["MAD score"] = table.mean(axis=1, skipna=False)
    table["settings"] = best.groupby("mixer").size()
    return table.sort_values("MAD score", ascending=False)


def draw_mad(records: list[dict], stem: Path, sweep_dir: Path) -> list[Path]:
    """The MAD score table as CSV, PNG and PDF."""
    table = mad_scores(records, sweep_dir)
    table.to_csv(stem.with_name("mad_scores.csv"))
    shown = table.drop(columns="settings").map(lambda v: "-" if pd.isna(v) else f"{v:.3f}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.3 * (len(shown.columns) + 1), 0.4 * (len(shown) + 1) + 0.4))
    ax.axis("off")
    headers = [c.replace("_", "\n") for c in shown.columns]
    grid = ax.table(cellText=shown.to_numpy(), rowLabels=list(shown.index), colLabels=headers, loc="center",
                    cellLoc="center")
    grid.scale(1, 1.6)
    header_lines = max(label.count("\n") + 1 for label in headers)
    for (row, col), cell in grid.get_celld().items():
        if row == 0:  # a task name wraps onto several lines: the header row grows so none is clipped
            cell.set_height(cell.get_height() * (1 + 0.6 * (header_lines - 1)))
        elif col == -1:
            cell.get_text().set_color(mixer_colour(shown.index[row - 1]))
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3f}".format):
        print(table)
    return [stem.with_name("mad_scores.csv"), *_save(fig, stem)]


def curves_frame(records: list[dict]) -> pd.DataFrame:
    """One row per (run, epoch) of the runs with a history: task, seq_len, d_model, mixer (its label), lr, seed,
    epoch (counted from 1) and test accuracy."""
    rows = [{"task": r["task"], "seq_len": r["seq_len"], "d_model": r["d_model"], "mixer": r.get("label", r["mixer"]),
             "lr": r["lr"], "seed": r.get("seed", 0), "id": r["id"], "epoch": h["epoch"] + 1, "accuracy": h["test/acc"]}
            for r in records for h in r.get("history") or [] if h.get("test/acc") is not None]
    return pd.DataFrame(rows)


def draw_curves(records: list[dict], stem: Path) -> list[Path]:
    """Test accuracy against epoch, a line per run, a panel per (task, N, d_model, mixer)."""
    frame = curves_frame(records)
    if frame.empty:
        raise ValueError("no run with a per-epoch history of test accuracy (test/acc)")
    plt = _pyplot()
    lrs = sorted(frame["lr"].unique())
    colours = dict(zip(lrs, plt.get_cmap("viridis")([i / max(len(lrs) - 1, 1) * 0.9 for i in range(len(lrs))])))
    seeds = sorted(frame["seed"].unique())
    styles = dict(zip(seeds, itertools.cycle(["-", "--", ":", "-."])))
    panels = frame.groupby(["task", "seq_len", "d_model", "mixer"])  # sorted by key
    fig, axes = _panels(panels.ngroups)
    for ax, ((task, n, d, mixer), panel) in zip(axes, panels):
        for (lr, seed, _), run in sorted(panel.groupby(["lr", "seed", "id"])):
            ax.plot(run["epoch"], run["accuracy"], color=colours[lr], linestyle=styles[seed], linewidth=1.2,
                    label=f"lr {lr:.2g}" + (f", seed {seed}" if len(seeds) > 1 else ""))
        ax.set_title(f"{mixer}: {task}, N={n}, d={d}", fontsize=9)
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    fig.tight_layout()
    return _save(fig, stem)


def draw(figure: str, sweep_dir: Path) -> list[Path]:
    """Draw ``figure`` (one of :data:`FIGURES`) from the sweep folder; returns the files written."""
    sweep_dir = Path(sweep_dir)
    records = label_mixers(latest_records(sweep_dir), sweep_dir)
    stem = sweep_dir / figure
    if figure == "pareto":
        return draw_pareto(records, stem)
    if figure == "length":
        return draw_length(records, stem, sweep_dir)
    if figure == "curves":
        return draw_curves(records, stem)
    return draw_mad(records, stem, sweep_dir)
