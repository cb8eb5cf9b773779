"""End-to-end CPU training: softmax attention and GatedFWA learn a small MQAR."""
from zoo.config import make_run_config, validate
from zoo.run import train


def test_softmax_learns_small_mqar(tmp_path):
    cfg = make_run_config({
        "task": {"name": "mqar", "params": {"vocab_size": 128, "input_seq_len": 32, "num_kv_pairs": 4},
                 "train": [{"num_examples": 4000}], "test": [{"num_examples": 500}]},
        # the training loop must learn; mixer init and no dropout learn this cell in a few CPU epochs, while
        # the default Zoology setup starts slower (0.60 after 12 epochs here, as Zoology's own attention does)
        "model": {"mixer": "softmax", "d_model": 64, "n_layers": 2, "init": "mixer", "dropout": 0.0,
                  "embed_dropout": 0.0},
        "train": {"batch_size": 64, "max_epochs": 12, "lr": 3e-3, "early_stop_accuracy": 0.95,
                  "progress_bar": False},
    })
    validate(cfg)
    record = train(cfg, tmp_path)
    assert record["status"] == "completed", record["error"]
    assert record["accuracy"] >= 0.9, record["history"]
    assert record["epochs"] < 12  # early stopping fired
    assert (tmp_path / "metrics.csv").exists()


def test_gatedfwa_learns_past_the_guessing_plateau(tmp_path):
    """The quickstart's gatedfwa cell, published layer, default setup: it must leave the 1/num_kv_pairs = 0.25
    plateau. Measured on a 2-core CPU: 0.51 (2 threads) and 0.78 (1 thread) after 8 epochs; layers missing
    QK-norm or the output norm/gate stall at 0.24-0.30 (results/FIDELITY.md)."""
    cfg = make_run_config({
        "task": {"name": "mqar", "params": {"vocab_size": 256, "input_seq_len": 64, "num_kv_pairs": 4},
                 "train": [{"num_examples": 8000}], "test": [{"num_examples": 500}]},
        "model": {"mixer": "gatedfwa", "d_model": 64, "n_layers": 2},
        "train": {"batch_size": 64, "max_epochs": 8, "lr": 3e-3, "early_stop_accuracy": 0.4, "progress_bar": False},
    })
    record = train(cfg, tmp_path)
    assert record["status"] == "completed", record["error"]
    assert record["accuracy"] >= 0.4, record["history"]


def test_segments_report_their_own_accuracy(tmp_path):
    cfg = make_run_config({
        "task": {"name": "mqar", "params": {"vocab_size": 64, "input_seq_len": 16, "num_kv_pairs": 2},
                 "train": [{"num_examples": 128}, {"num_examples": 128, "input_seq_len": 32, "num_kv_pairs": 4}],
                 "test": [{"num_examples": 32}, {"num_examples": 32, "input_seq_len": 32, "num_kv_pairs": 4}]},
        "model": {"mixer": "gatedfwa", "d_model": 16, "n_layers": 1},
        "train": {"batch_size": 32, "max_epochs": 1, "progress_bar": False},
    })
    record = train(cfg, tmp_path)
    assert record["status"] == "completed", record["error"]
    assert set(record["segment_accuracy"]) == {"N16_kv2", "N32_kv4"}
    assert record["seq_len"] == 32
