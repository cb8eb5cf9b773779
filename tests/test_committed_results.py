"""The GPU results committed under results/: each folder's records belong to its sweep as the sweep file defines it
now, every run's last record is a finished run, the committed leaderboard (and the grid README's best-lr table) is
what ``zoo.leaderboard`` makes of the records, and the README's run count is the records' count. A results commit
that forgets to regenerate them, or a sweep edit that would orphan finished runs (their ids change, so a rerun would
not skip them), fails here."""
import io
import re
from pathlib import Path

import pandas as pd
import pytest

from zoo.leaderboard import leaderboard, load_records, markdown
from zoo.results import final_records, read_jsonl
from zoo.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p.parent.name for p in (ROOT / "results").glob("*/results.jsonl"))


def sweep_ids(sweep: str, out) -> set[str]:
    """The run ids of sweeps/<sweep>.yaml as the file defines it now."""
    return {run.id for run in load_sweep(ROOT / "sweeps" / f"{sweep}.yaml", out=str(out), lazy=True).runs}


def test_every_sweep_results_folder_is_checked():
    assert FOLDERS == ["mad_recall", "mqar", "mqar_normed", "mqar_timing", "s5_protocol", "state_tracking",
                       "swa_window"]


@pytest.mark.parametrize("name", FOLDERS)
def test_records_are_finished_runs_of_the_sweep(name, tmp_path):
    ids = sweep_ids(name, tmp_path)
    records = final_records(ROOT / "results" / name)
    assert set(records) <= ids
    assert {r["status"] for r in records.values()} == {"completed"}
    title = (ROOT / "results" / name / "README.md").read_text().splitlines()[0]
    counts = [int(n) for n in re.findall(r"(\d+) (?:of \d+ )?runs", title)]
    assert counts == [len(records)], title
    partial = re.search(r"(\d+) of (\d+) runs", title)
    assert partial is None or int(partial.group(2)) == len(ids), title


@pytest.mark.parametrize("name", FOLDERS)
def test_committed_leaderboard_is_regenerated_from_the_records(name):
    folder = ROOT / "results" / name
    csv = io.StringIO()
    leaderboard(load_records(folder)).to_csv(csv, index=False)
    csv.seek(0)
    pd.testing.assert_frame_equal(pd.read_csv(csv), pd.read_csv(folder / "leaderboard.csv"), check_exact=False,
                                  rtol=1e-9)


def test_grid_readme_table_is_regenerated_from_the_records():
    folder = ROOT / "results" / "mqar"
    assert markdown(leaderboard(load_records(folder))) in (folder / "README.md").read_text()


@pytest.mark.parametrize("sweep, records", [("gatedfwa_claims", "h100_n128_protocol.jsonl"),
                                            ("gatedfwa_claim_seeds", "h100_claim_cell_seeds.jsonl"),
                                            ("gatedfwa_claim_seeds_normed", "h100_claim_cell_seeds_normed.jsonl"),
                                            ("gatedfwa_ablation", "h100_gatedfwa_ablation_n128.jsonl")])
def test_fidelity_records_are_runs_of_their_sweep(sweep, records, tmp_path):
    """results/FIDELITY.md's claim runs keep their ids: rerunning their sweep finds them finished."""
    ids = {r["id"] for r in read_jsonl(ROOT / "results" / "fidelity" / records)}
    assert ids and ids <= sweep_ids(sweep, tmp_path)
