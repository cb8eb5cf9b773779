"""``python -m zoo.bench.grid_cost``: a finished sweep's groups priced by a timing sweep of the same cells."""
import json

import pytest

from zoo.bench import grid_cost


def _record(run_id, mixer, lr, epochs, history=None, train_seconds=0.0, wall_seconds=0.0, **settings):
    return {"id": run_id, "status": "completed", "mixer": mixer, "epochs": epochs, "device": "a pretended GPU",
            "history": [{"epoch": i, "train_seconds": s} for i, s in enumerate(history or [])],
            "train_seconds": train_seconds, "wall_seconds": wall_seconds,
            "settings": {"model.mixer": mixer, "model.d_model": 64, "train.lr": lr, "seed": 0, **settings}}


def _folder(path, records):
    path.mkdir()
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def folders(tmp_path):
    # the protocol: cell a's members stopped after 3 and 1 epochs, cell b's both after 2 (early stop on)
    full = {"train.max_epochs": 64}
    protocol = _folder(tmp_path / "protocol", [
        _record("a1", "a", 1e-3, 3, **full), _record("a2", "a", 1e-2, 1, **full),
        _record("b1", "b", 1e-3, 2, **full), _record("b2", "b", 1e-2, 2, **full)])
    # the timing sweep: each cell 2 epochs; a: first epoch 5 s, then 2 s; 8 s of training in all (so 0.5 s of
    # evaluation an epoch) and 10 s of wall time (2 s of start-up); b twice as slow in every part
    timing = _folder(tmp_path / "timing", [
        _record(f"t{m}{i}", m, lr, 2, [5.0 * k, 2.0 * k], 8.0 * k, 10.0 * k, **{"train.max_epochs": 2})
        for m, k in (("a", 1), ("b", 2)) for i, lr in enumerate((1e-3, 1e-2))])
    return protocol, timing


def test_each_group_is_priced_from_its_cells_timing(folders):
    cost = grid_cost.grid_cost(*folders)
    groups = {g["mixer"]: g for g in cost["groups"]}
    assert not cost["missing"] and set(groups) == {"a", "b"}
    a, b = groups["a"], groups["b"]
    assert (a["startup_s"], a["first_s"], a["epoch_s"], a["eval_s"]) == (2.0, 3.0, 2.0, 0.5)
    # upper: 2 + 3 + 3 epochs x 2.5 s; lower: 2 + 3 + 2.5 s x (2 + 1 + 1 member-epochs) / 2 members
    assert a["upper_s"] == pytest.approx(12.5) and a["lower_s"] == pytest.approx(10.0)
    # b: both members train both epochs, so the bounds agree: 4 + 6 + 2 x 5
    assert b["upper_s"] == pytest.approx(20.0) and b["lower_s"] == pytest.approx(20.0)
    assert (a["epochs"], a["run_epochs"], b["epochs"], b["run_epochs"]) == (3, 4, 2, 4)


def test_recorded_test_passes_price_a_later_epoch_and_the_rest_is_paid_once(folders):
    """With ``test_seconds`` in the history (zoo keeps it now): eval is a later epoch's test pass, and the first
    epoch's extra test time and the fit's other seconds are paid once: the fit's 1 s outside training, less two
    later test passes of 0.1 s."""
    protocol, timing = folders
    records = [json.loads(line) for line in (timing / "results.jsonl").read_text().splitlines()]
    for r in records:
        k = r["train_seconds"] / 8.0
        r["history"][0]["test_seconds"], r["history"][1]["test_seconds"] = 0.5 * k, 0.1 * k
    (timing / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    a = {g["mixer"]: g for g in grid_cost.grid_cost(protocol, timing)["groups"]}["a"]
    assert a["eval_s"] == pytest.approx(0.1) and a["epoch_s"] == 2.0
    assert a["first_s"] == pytest.approx(3.0 + (8.0 - 7.0 - 0.2))
    # upper: 2 + 3.8 + 3 epochs x 2.1 s
    assert a["upper_s"] == pytest.approx(12.1)


def test_a_cell_without_timing_is_named(folders, tmp_path):
    protocol, timing = folders
    lines = (timing / "results.jsonl").read_text().splitlines()
    (timing / "results.jsonl").write_text("".join(line + "\n" for line in lines if '"mixer": "b"' not in line))
    cost = grid_cost.grid_cost(protocol, timing)
    assert [g["mixer"] for g in cost["groups"]] == ["a"] and cost["missing"] == ["mixer=b, d=64, seed=0"]


def test_a_timing_run_of_one_epoch_is_refused(folders):
    protocol, timing = folders
    one = _record("t", "a", 1e-3, 1, [5.0], 6.0, 7.0, **{"train.max_epochs": 1})
    (timing / "results.jsonl").write_text(json.dumps(one) + "\n")
    with pytest.raises(ValueError, match="needs at least 2"):
        grid_cost.grid_cost(protocol, timing)


def test_makespan_is_longest_first():
    assert grid_cost.makespan([3.0, 5.0, 3.0, 4.0], 2) == 8.0  # 5+3 and 4+3
    assert grid_cost.makespan([3.0, 5.0, 3.0, 4.0], 1) == 15.0
    assert grid_cost.makespan([3.0, 5.0], 8) == 5.0


def test_cli_prints_the_totals_and_refuses_bad_input(folders, tmp_path, capsys):
    protocol, timing = folders
    out = tmp_path / "cost.json"
    assert grid_cost.main([str(protocol), str(timing), "--gpus", "1,2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "timed on: a pretended GPU; 2 groups priced" in text
    assert "longest group: mixer=b, d=64, seed=0, 2 epochs" in text
    assert "wall on 2 GPU(s), longest first: 0.01 h upper" in text  # max(20, 12.5) s
    assert len(json.loads(out.read_text())["groups"]) == 2
    with pytest.raises(SystemExit) as exit_info:
        grid_cost.main([str(protocol), str(timing), "--gpus", "0"])
    assert exit_info.value.code == 2 and "--gpus: '0': expected a comma list of positive integers" in \
        capsys.readouterr().err
    assert grid_cost.main([str(protocol), str(tmp_path / "nothing")]) == 2
    assert "no finished runs in" in capsys.readouterr().err


def test_a_later_timing_replaces_only_the_cells_it_times(folders, tmp_path, capsys):
    """Cell b timed again at half its first timing's cost: b is priced from the second folder, a from the first."""
    protocol, timing = folders
    again = _folder(tmp_path / "again", [
        _record(f"u{i}", "b", lr, 2, [5.0, 2.0], 8.0, 10.0, **{"train.max_epochs": 2})
        for i, lr in enumerate((1e-3, 1e-2))])
    groups = {g["mixer"]: g for g in grid_cost.grid_cost(protocol, timing, again)["groups"]}
    assert groups["a"]["timing"] == str(timing) and groups["a"]["upper_s"] == pytest.approx(12.5)
    assert groups["b"]["timing"] == str(again) and groups["b"]["upper_s"] == pytest.approx(10.0)  # 2 + 3 + 2 x 2.5
    assert grid_cost.main([str(protocol), str(timing), str(again), "--gpus", "1"]) == 0
    assert f"2 groups priced (1 timed in {timing}, 1 timed in {again})" in capsys.readouterr().out


def test_epoch_cost_is_piecewise_linear_in_the_members_training():
    sizes = {1: {"epoch": 0.9, "eval": 0.1}, 2: {"epoch": 1.5, "eval": 0.1}, 4: {"epoch": 2.9, "eval": 0.1}}
    assert [grid_cost.epoch_cost(sizes, k) for k in (1, 2, 3, 4)] == pytest.approx([1.0, 1.6, 2.3, 3.0])
    del sizes[4]  # beyond the sizes timed: the line through the last two
    assert grid_cost.epoch_cost(sizes, 4) == pytest.approx(2.8)


def test_singles_timed_apart_give_an_estimate_between_the_bounds(folders, tmp_path, capsys):
    """Cell a also timed one member at a time (1.5 s an epoch, no test pass): its group's epochs cost 2.5 s with
    both members training and 1.5 s with one, so 2 + 3 + 2.5 + 1.5 + 1.5; b, whose members stop together, costs its upper
    bound. Without a singles timing of b, no estimate is printed, and the rest is unchanged."""
    protocol, timing = folders
    singles = _folder(tmp_path / "singles", [
        {**_record(f"s{m}", m, 1e-3, 2, [3.0 * k, 1.5 * k], 4.5 * k, 5.0 * k, **{"train.max_epochs": 2}),
         "group_size": 1} for m, k in (("a", 1), ("b", 2))])
    groups = {g["mixer"]: g for g in grid_cost.grid_cost(protocol, singles, timing)["groups"]}
    a, b = groups["a"], groups["b"]
    assert a["estimate_s"] == pytest.approx(10.5) and a["lower_s"] < 10.5 < a["upper_s"]
    assert b["estimate_s"] == pytest.approx(b["upper_s"]) and a["timings"] == {1: str(singles), 2: str(timing)}
    assert a["timing"] == str(timing)  # the one-time seconds and the bounds come from the whole group's timing
    assert grid_cost.main([str(protocol), str(singles), str(timing), "--gpus", "1"]) == 0
    text = capsys.readouterr().out
    assert "GPU-h estimate" in text and "h estimate" in text.splitlines()[-1]
    lines = (singles / "results.jsonl").read_text().splitlines()
    (singles / "results.jsonl").write_text(lines[0] + "\n")
    assert grid_cost.main([str(protocol), str(singles), str(timing), "--gpus", "1"]) == 0
    text = capsys.readouterr().out
    assert "no estimate: 1 of 2 groups have their cell timed at one group size only" in text
    assert "estimate" not in text.splitlines()[-1]


def test_the_epoch_table_prints_each_size_timed_against_one_mixer(folders, tmp_path, capsys):
    """``--epochs a``: per group size, a later epoch of each cell and mixer, and its ratio to mixer a's."""
    protocol, timing = folders
    singles = _folder(tmp_path / "singles", [
        {**_record(f"s{m}", m, 1e-3, 2, [3.0 * k, 1.5 * k], 4.5 * k, 5.0 * k, **{"train.max_epochs": 2}),
         "group_size": 1} for m, k in (("a", 1), ("b", 2))])
    assert grid_cost.main([str(protocol), str(singles), str(timing), "--gpus", "1", "--epochs", "a"]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = lines.index("a later epoch's training, s, 1 member(s) at once (x a):")
    assert lines[i + 1].split() == ["cell", "a", "b"]
    assert lines[i + 2].split() == ["d=64,", "seed=0", "1.50", "(1.00)", "3.00", "(2.00)"]
    assert lines[i + 3] == "a later epoch's training, s, 2 member(s) at once (x a):"
    assert lines[i + 5].split() == ["d=64,", "seed=0", "2.00", "(1.00)", "4.00", "(2.00)"]
    assert grid_cost.main([str(protocol), str(singles), str(timing), "--epochs", "c"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--epochs=c is not valid: expected one of the timed mixers ['a', 'b']" in captured.err
