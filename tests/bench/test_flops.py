"""``python -m zoo.bench.flops``: a finished sweep's weight-matmul FLOPs and the floor they put under its time."""
import json

import pytest
import torch

from zoo.bench import flops
from zoo.config import make_run_config, plain, record_fields, resolve, validate
from zoo.model import LanguageModel

V, D, B, L, K = 96, 16, 3, 32, 4


def test_softmax_counts_every_projection_and_the_head_at_the_labelled_rows():
    """Two softmax blocks: the first projects every row (qkv 3D^2, output D^2), the last its qkv on every row and
    its output at the K labelled rows alone, and the tied head reads the K rows. Scores and values are not counted.
    Training pays each product three times (every operand of these matmuls needs its gradient)."""
    torch.manual_seed(0)
    model = LanguageModel(V, D, n_layers=2, mixer="softmax", max_seq_len=L, mixer_kwargs={"num_heads": 1})
    inputs = torch.randint(0, V, (B, L))
    positions = torch.arange(0, L, L // K).expand(B, -1)
    totals = flops.weight_matmul_flops(model, inputs, positions, peak=1e12, bandwidth=1e12)
    forward = 2 * (B * L * 4 * D * D + B * L * 3 * D * D + B * K * D * D + B * K * D * V)
    assert totals["forward"] == forward and totals["training"] == 3 * forward
    # the first qkv projection, bound by its bytes at these rates: (B L D + D 3D + B L 3D) bf16 elements in 1e12 B/s
    assert totals["forward_s"] > 2 * (B * L * D + 3 * D * D + B * L * 3 * D) / 1e12
    assert totals["training_s"] == pytest.approx(3 * totals["forward_s"])


def _run(mixer, batch_size, **model):
    return plain(make_run_config({
        "task": {"name": "mqar", "params": {"vocab_size": V, "input_seq_len": L, "num_kv_pairs": K},
                 "train": [{"num_examples": 12}], "test": [{"num_examples": 6}]},
        "model": {"mixer": mixer, "d_model": D, "n_layers": 2, **model},
        "train": {"batch_size": batch_size, "lr": 1e-3}}))


def test_an_epoch_is_its_examples_and_its_steps_work_apart_from_the_batch():
    """Softmax has no work independent of the batch, so its epoch does not depend on the batch size, and its test
    pass is the forward of its examples (a third of training's, per example); but each step reads the weights, so
    its floor seconds grow with the steps. Hyena's filter runs once a step whatever the batch, so one example a
    step pays it 12 times where one batch of 12 pays it once."""
    one, whole = flops.epoch_flops(_run("softmax", 1)), flops.epoch_flops(_run("softmax", 12))
    assert (one["train"], one["test"]) == pytest.approx((whole["train"], whole["test"]))
    assert one["train_s"] > whole["train_s"] and one["test_s"] > whole["test_s"]
    assert one["test"] == pytest.approx(one["train"] / 3 * 6 / 12)
    one, whole = flops.epoch_flops(_run("hyena", 1)), flops.epoch_flops(_run("hyena", 12))
    filter_flops = (one["train"] - whole["train"]) / 11
    assert filter_flops > 0 and one["train_s"] > whole["train_s"]


@pytest.fixture
def sweep(tmp_path):
    """A finished sweep of two cells: softmax at two lrs (3 and 1 epochs), swa at one (2 epochs)."""
    records = []
    for mixer, lr, epochs in (("softmax", 1e-3, 3), ("softmax", 1e-2, 1), ("swa", 1e-3, 2)):
        cfg = make_run_config(_run(mixer, 4) | {"train": {**_run(mixer, 4)["train"], "lr": lr}})
        records.append({"id": f"{mixer}{lr}", "status": "completed", "epochs": epochs,
                        **record_fields(cfg, validate(cfg))})
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


def test_a_sweeps_runs_cost_their_epochs(sweep):
    rows = {(r["mixer"], r["epochs"]): r for r in flops.sweep_flops(sweep)}
    epoch = flops.epoch_flops(resolve(_run("softmax", 4)))
    for epochs in (3, 1):
        row = rows["softmax", epochs]
        assert row["flops"] == pytest.approx(epochs * (epoch["train"] + epoch["test"]))
        assert row["floor_s"] == pytest.approx(epochs * (epoch["train_s"] + epoch["test_s"]))
        assert row["cell"] == f"N={L}, d={D}, seed=0"
    assert rows["swa", 2]["flops"] > 0


def test_cli_prints_each_mixer_and_refuses_bad_input(sweep, tmp_path, capsys):
    assert flops.main([str(sweep), "--json", str(tmp_path / "rows.json")]) == 0
    out = capsys.readouterr().out
    written = json.loads((tmp_path / "rows.json").read_text())
    assert written["peak_tflops"] == 989 and sorted(r["epochs"] for r in written["runs"]) == [1, 2, 3]
    assert "floor at 989 TFLOP/s and 4.8 TB/s" in out
    assert [line.split()[0] for line in out.splitlines()[2:]] == ["softmax", "swa", "all"]
    assert flops.main([str(sweep), "--peak-tflops", "0"]) == 2
    assert "--peak-tflops=0.0 is not valid" in capsys.readouterr().err
    assert flops.main([str(sweep), "--cells"]) == 2
    assert "--cells needs timing folders" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert flops.main([str(tmp_path / "empty")]) == 2
    assert "no finished runs" in capsys.readouterr().err
