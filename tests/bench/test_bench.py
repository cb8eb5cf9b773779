"""Every section of ``python -m zoo.bench`` runs end to end on tiny shapes on the CPU (timings unchecked)."""
import pytest
import torch
from omegaconf import OmegaConf

from zoo.bench import __main__ as bench

TINY = {
    "name": "tiny",
    "base": {"task": {"name": "mqar", "params": {"vocab_size": 64},
                      "train": [{"num_examples": 64}], "test": [{"num_examples": 32}]},
             "model": {"n_layers": 2}, "train": {"max_epochs": 4, "progress_bar": False}},
    "grid": {"model.mixer": ["softmax", "swa"],
             "shape": [{"task.params.input_seq_len": 16, "task.params.num_kv_pairs": 2, "train.batch_size": 32}],
             "model.d_model": [16, 32], "train.lr": [1e-3, 3e-3]},
    "mixer_kwargs": {"softmax": {"num_heads": 1}},
}


@pytest.fixture
def tiny_sweep(tmp_path):
    path = tmp_path / "tiny.yaml"
    OmegaConf.save(OmegaConf.create(TINY), path)
    return str(path)


def test_every_section_runs(tiny_sweep, tmp_path, monkeypatch, capsys):
    peer = {"status": "completed", "data_s": 1.0, "epoch_s": 2.0, "first_epoch_s": 2.5, "accuracy": [0.1, 0.2]}
    monkeypatch.setattr("zoo.bench.zoology_peer.zoology_attention_epoch", lambda *a, **k: peer)
    timed = []  # the zoology section's zoo runs train the peer's model
    monkeypatch.setattr(bench, "time_run", lambda cfg, run=bench.time_run: timed.append(cfg.model) or run(cfg))
    out = tmp_path / "bench.json"
    assert bench.main(["--sweep", tiny_sweep, "--epochs", "2", "--runs", "1,2", "--gpus", "1,2",
                       "--step-shape", "4,16,16", "--mixers", "softmax,swa",
                       "--zoology", "stand-in", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for title in ("one training step", "x epoch", "seconds per epoch", "runs per GPU", "sweep wall time over",
                  "grid projection"):
        assert title in text, title
    numbers = OmegaConf.to_container(OmegaConf.load(out))
    assert set(numbers) >= {"steps", "zoology", "epochs", "width_factor", "scaling", "gpus", "grid"}
    assert numbers["zoology"]["zoo bf16 graphs"]["status"] == "completed"  # graphs off by themselves on a CPU
    peer_models = [m for m in timed if m.state_mixer == "normed"]
    assert len(peer_models) == 3 and all(m.embed_dropout == 0.1 for m in peer_models)  # fp32, bf16 eager, graphs
    assert numbers["grid"]["groups"] == 2 * 1 * 2 and numbers["scaling"][1][1] == 2  # both concurrent runs ran
    assert not any(numbers["grid"]["left_out"].values()) and "left out" not in text
    assert all(row["error"] is None for row in numbers["steps"] if row["mixer"] in ("softmax", "swa"))
    assert all(row["wide_ms"] > 0 for row in numbers["steps"] if row["mixer"] in ("softmax", "swa"))
    assert "batchx4 ms" in text
    # the gpus section's sweeps (CPU workers here): 1 and 2 devices, each all 4 runs (2 mixers x 2 lrs at d=16)
    assert [(row[0], row[1], row[6]) for row in numbers["gpus"]] == [(1, 4, 0), (2, 4, 0)]
    for devices, _, wall, _, groups_s, outside_s, _ in numbers["gpus"]:  # the groups' seconds, the sweep's around them
        assert 0 < groups_s <= devices * wall and 0 < outside_s < wall


def test_the_grid_projection_covers_the_cells_timed_and_names_the_rest():
    """A bench of a slice (some mixers, lengths or widths) projects that slice: no KeyError for a mixer or length not
    timed (it crashed so on an H200 with --lengths 256), and no width priced as the reference's without a factor."""
    from zoo.bench.throughput import project_grid

    spec = OmegaConf.create({**TINY, "grid": {**TINY["grid"], "shape": [
        {"task.params.input_seq_len": n, "task.params.num_kv_pairs": 2, "train.batch_size": 32} for n in (16, 32)]}})
    proj = project_grid(spec, {("softmax", 16): 2.0}, {}, startup_s=3.0, speedup=2.0, ref_d=16)
    assert proj["groups"] == 1 and proj["serial_hours"] * 3600 == pytest.approx(4 * 2.0 + 3.0)
    assert proj["hours_one_gpu"] == pytest.approx(proj["serial_hours"] / 2)
    assert proj["left_out"] == {"model.mixer": ["swa"], "task.params.input_seq_len": [32], "model.d_model": [32]}
    proj = project_grid(spec, {("softmax", 16): 2.0}, {(16, 32): 1.5}, startup_s=3.0, speedup=1.0, ref_d=16)
    assert proj["groups"] == 2 and proj["serial_hours"] * 3600 == pytest.approx(11.0 + 4 * 2.0 * 1.5 + 3.0)
    assert proj["left_out"]["model.d_model"] == []


def test_steps_time_a_group_beside_one_model_at_its_batch(monkeypatch):
    """The steps section's bound for a group of G: one model (not G) at G times the batch."""
    from zoo.bench import step as step_bench

    made = []

    def make_step(mixer, batch, seq_len, d_model, device, graphs, group=1, **kw):
        made.append((batch, group))
        return (lambda: None), torch.nn.Linear(2, 2)

    monkeypatch.setattr(step_bench, "make_step", make_step)
    (row,) = step_bench.step_times(["softmax"], batch=8, seq_len=16, d_model=16, device="cpu", group=3, warmup=0,
                                   iters=1)
    assert made == [(8, 1), (8, 1), (8, 3), (24, 1)]  # eager, graphs, the group of 3, one model at 3x the batch
    assert row["error"] is None and row["wide_ms"] >= 0
    # the rate's FLOPs: the real model's at this shape (make_step's stand-in is not what is counted)
    assert row["step_flops"] == step_bench.step_flops("softmax", 8, 16, 16) > 0
    assert "batchx3 ms" in step_bench.header(3) and len(step_bench.format_row(row).split()) == 11


def test_steps_ratio_to_softmax_is_the_median_of_rounds_beside_softmax_s_kept_step(monkeypatch):
    """A mixer's graphs step is timed in rounds, each right after softmax's kept graphs step: its ratio to softmax is
    the median of the rounds' ratios, untouched by the GPU's speed changing between rounds (scripted here: each round
    slower than the last), where the two columns' medians would give another ratio; a mixer timed before softmax
    gets the medians' ratio."""
    from zoo.bench import step as step_bench

    cost = {"softmax": 1.0, "early": 2.0, "late": 3.0}  # each step's ms at the GPU's first speed
    slowdown = [1.0]
    timed = []

    def make_step(mixer, batch, seq_len, d_model, device, graphs, group=1, **kw):
        step = (lambda: None)
        step.mixer, step.graphs, step.group = mixer, graphs, group
        return step, torch.nn.Linear(2, 2)

    def median_ms(step, device, warmup, iters):
        if step.mixer == "softmax" and step.graphs:  # a round starts (or softmax's own rounds go on): slower
            slowdown[0] *= 1.5
        timed.append((step.mixer, step.graphs, step.group))
        return cost[step.mixer] * slowdown[0]

    monkeypatch.setattr(step_bench, "make_step", make_step)
    monkeypatch.setattr(step_bench, "_median_ms", median_ms)
    monkeypatch.setattr(step_bench, "step_flops", lambda *a, **k: 1.0)
    early, softmax, late = step_bench.step_times(["early", "softmax", "late"], batch=8, seq_len=16, d_model=16,
                                                 device="cpu", group=2, warmup=0, iters=1, rounds=3)
    assert [r["error"] for r in (early, softmax, late)] == [None] * 3
    assert late["ratio_to_softmax"] == 3.0 and softmax["ratio_to_softmax"] == 1.0
    assert late["graphs_ms"] / softmax["graphs_ms"] > 3.5  # the medians' ratio, which drifted
    assert early["ratio_to_softmax"] == early["graphs_ms"] / softmax["graphs_ms"]
    # late's rounds, before its group's timing: softmax's kept step, then late's, three times
    group_at = timed.index(("late", True, 2))
    assert timed[group_at - 6:group_at] == [("softmax", True, 1), ("late", True, 1)] * 3


def pretend_gpus(monkeypatch, n: int) -> None:
    """torch.cuda says this machine has ``n`` GPUs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: f"{n} pretended GPU(s)")


def record_sweeps(monkeypatch) -> list[tuple]:
    """The gpus section's sweeps, recorded as (only, epochs, devices, cuda) instead of trained."""
    from zoo.bench import gpu_scaling

    calls = []

    def sweep(sweep_file, only, epochs, devices, cuda):
        calls.append((only, epochs, devices, cuda))
        return {"devices": devices, "wall_s": 10.0 / devices, "completed": 4, "exit": 0, "groups_s": 8.0,
                "outside_s": 1.0, "error": ""}

    monkeypatch.setattr(gpu_scaling, "sweep_wall_seconds", sweep)
    return calls


def test_the_gpus_section_needs_two_gpus(tiny_sweep, monkeypatch, capsys):
    """On a machine with one GPU there is nothing to compare: the section says so and trains nothing."""
    pretend_gpus(monkeypatch, 1)
    assert bench.main(["--sweep", tiny_sweep, "--sections", "gpus"]) == 0
    assert "gpus section skipped: it compares 1 GPU with more (--gpus 1,2,4,8), and this machine has 1" in \
        capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--gpus", "--runs"])
def test_device_and_run_counts_must_be_positive_integers(tiny_sweep, capsys, flag):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--sweep", tiny_sweep, "--sections", "gpus", flag, "1,two"])
    assert exit_info.value.code == 2 and "expected a comma list of positive integers" in capsys.readouterr().err


def test_unknown_section_is_refused(tiny_sweep, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--sweep", tiny_sweep, "--sections", "steps,speed"])
    assert exit_info.value.code == 2 and "--sections='speed'" in capsys.readouterr().err


@pytest.mark.parametrize("kernel, kind", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
    ("nvjet_tst_128x64_64x8_2x1_v_bz_TNT", "matmul"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>", "attention"),
    ("_attn_bwd_dkdv", "attention"),
    ("void softmax_warp_backward<float, float, float, 9, false, false>", "attention"),  # the dense attention's rows
    ("void softmax_warp_forward<float, float, float, 9, true, false>", "other"),  # log-softmax: validation's loss
    ("void cunn_SoftMaxForward<4, float, float, float, SoftMaxForwardEpilogue>", "attention"),
    ("void cunn_SoftMaxForward<4, float, float, float, LogSoftMaxForwardEpilogue>", "other"),
    ("_selective_scan_bwd_kernel", "scan / recurrence"),
    ("_norm_bwd_kernel", "norm"),
    ("_cross_entropy_bwd_kernel", "loss"),
    ("_loss_and_grad_kernel", "loss"),
    ("_bias_grad_column_sum_kernel", "elementwise / reduction"),
    ("void at::native::(anonymous namespace)::fused_adamw_kernel", "optimizer"),
    ("void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel", "embedding"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise / reduction"),
    ("some_new_kernel", "other"),
])
def test_profile_sorts_kernels_into_kinds_of_work(kernel, kind):
    from zoo.bench.profile import kind_of
    assert kind_of(kernel) == kind


def launched_triton_kernels() -> dict[str, str]:
    """{kernel name: module} of every Triton kernel zoo launches: the ``@triton.jit`` functions of ``zoo.kernels``
    (under any autotune or heuristics wrapper) that their module calls with a launch grid, ``name[grid](...)``."""
    import importlib
    import inspect
    import pkgutil
    import re

    import triton

    import zoo.kernels

    from triton.runtime.interpreter import InterpretedFunction

    jitted = (triton.runtime.JITFunction, InterpretedFunction)  # the latter under TRITON_INTERPRET=1 (conftest)
    found = {}
    for info in pkgutil.walk_packages(zoo.kernels.__path__, "zoo.kernels."):
        module = importlib.import_module(info.name)
        source = inspect.getsource(module)
        for name, obj in vars(module).items():
            while not isinstance(obj, jitted) and hasattr(obj, "fn"):
                obj = obj.fn
            if isinstance(obj, jitted) and obj.fn.__module__ == info.name and re.search(rf"\b{name}\[", source):
                found[name] = info.name
    return found


def test_the_profile_sorts_every_kernel_zoo_launches():
    """A profile's kinds of work leave none of zoo's own Triton kernels under "other" (RWKV-7's chunked kernels and
    the token shift's were there until they were named for what they do)."""
    from zoo.bench.profile import kind_of
    kernels = launched_triton_kernels()
    assert {"_rwkv7_chunk_key_grads_kernel", "_token_shift_forward_kernel", "_attn_fwd"} <= kernels.keys()
    assert {name: module for name, module in kernels.items() if kind_of(name) == "other"} == {}


def test_the_gpus_section_warms_the_caches_before_it_times_any_count(tiny_sweep, monkeypatch, capsys):
    """On GPUs, one untimed epoch on every GPU used comes first, then each count with the asked epochs."""
    pretend_gpus(monkeypatch, 4)
    calls = record_sweeps(monkeypatch)
    assert bench.main(["--sweep", tiny_sweep, "--sections", "gpus", "--gpus", "2,4", "--epochs", "3"]) == 0
    assert [call[1:] for call in calls] == [(1, 4, True), (3, 1, True), (3, 2, True), (3, 4, True)]
    assert "warm-up (one epoch of the slice on 4 GPUs, untimed" in capsys.readouterr().out


@pytest.mark.parametrize("widths, slice_widths", [(None, [16]), ("32,16", [16, 32])])
def test_the_gpus_section_times_the_slice_of_the_widths_asked(tiny_sweep, monkeypatch, widths, slice_widths):
    """The slice is the bench's mixers and lengths at the reference width, or at every width of --widths."""
    pretend_gpus(monkeypatch, 2)
    calls = record_sweeps(monkeypatch)
    argv = ["--sweep", tiny_sweep, "--sections", "gpus", "--gpus", "2", "--mixers", "swa"]
    assert bench.main(argv + (["--widths", widths] if widths else [])) == 0
    expected = ["model.mixer=swa", "task.params.input_seq_len=16", *(f"model.d_model={d}" for d in slice_widths)]
    assert [call[0] for call in calls] == [expected] * 3  # the warm-up, 1 GPU, 2 GPUs


@pytest.mark.parametrize("flag, value, allowed", [("--widths", "16,48", "16,32"), ("--lengths", "32", "16")])
def test_lengths_and_widths_must_be_the_sweeps(tiny_sweep, capsys, flag, value, allowed):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--sweep", tiny_sweep, "--sections", "gpus", flag, value])
    assert exit_info.value.code == 2
    bad = value.split(",")[-1]
    assert f"{flag}={bad} is not valid: expected values of the sweep's grid, {allowed}" in capsys.readouterr().err


def test_profile_takes_any_grid_cell_as_a_group_of_the_sweeps_learning_rates():
    import argparse

    from zoo.bench.profile import cell_arg, cell_configs
    from zoo.bench.zoology_peer import ZOOLOGY_MODEL
    cfgs = cell_configs("softmax", (512, 512), group=4, examples=1280)
    assert [c.train.lr for c in cfgs] == [1.0e-4, 4.6416e-4, 2.1544e-3, 1.0e-2]
    for c in cfgs:
        assert (c.task.params.input_seq_len, c.task.params.num_kv_pairs, c.model.d_model, c.train.batch_size) == \
            (512, 64, 512, 128)
        assert c.task.train[0].num_examples == 1280 and c.model.mixer_kwargs == {"num_heads": 1}
    (figure2,) = cell_configs("mamba")
    assert (figure2.task.params.input_seq_len, figure2.model.d_model, figure2.task.train[0].num_examples) == \
        (256, 128, 100000)
    assert (figure2.model.state_mixer, figure2.model.embed_dropout) == ("identity", 0.0)  # the sweep's base
    (zoology,) = cell_configs("softmax", model=ZOOLOGY_MODEL)
    assert (zoology.model.state_mixer, zoology.model.embed_dropout) == ("normed", 0.1)
    assert cell_arg("512,64") == (512, 64)
    with pytest.raises(argparse.ArgumentTypeError, match="not N,d_model"):
        cell_arg("512")
    with pytest.raises(ValueError, match=r"N=100 is not valid: expected one of the lengths of .*\[128, 256, 512\]"):
        cell_configs("softmax", (100, 64))


def test_profile_refuses_a_cell_the_sweep_lacks_before_it_looks_for_a_gpu(capsys):
    from zoo.bench.profile import main
    with pytest.raises(SystemExit) as exit_:
        main(["--cell", "100,64"])
    assert exit_.value.code == 2 and "N=100 is not valid" in capsys.readouterr().err


def test_profile_ranks_aten_ops_by_their_own_gpu_time_with_their_shapes():
    """What ``--ops`` prints, from the profiler's averages: aten ops only, by self GPU time, calls per step."""
    from types import SimpleNamespace

    from zoo.bench.profile import top_ops

    def op(key, us, count, shapes):
        return SimpleNamespace(key=key, self_device_time_total=us, count=count, input_shapes=shapes)

    averages = [op("aten::copy_", 3e5, 20, [[4, 8], [4, 8]]), op("ProfilerStep*", 9e6, 1, []),
                op("aten::mm", 5e5, 10, [[4, 8], [8, 2]]), op("aten::view", 0, 40, [[4, 8]]),
                op("aten::copy_", 1e5, 10, [[2], [2]])]
    assert top_ops(averages, 2, steps=10) == [("aten::mm", 0.5, 1.0, "[[4, 8], [8, 2]]"),
                                              ("aten::copy_", 0.3, 2.0, "[[4, 8], [4, 8]]")]


def test_a_failed_timing_row_says_why():
    """A timed run that did not complete shows the last line of its error in its row (the zoology section's compile
    row once said only "failed"); a completed one, its status."""
    error = "Traceback (most recent call last):\n  File ...\nBackendCompilerFailed: backend='inductor' raised: X\n\n"
    assert bench._status({"status": "failed", "error": error}) == ("failed: BackendCompilerFailed: backend='inductor' "
                                                                   "raised: X")
    assert bench._status({"status": "failed", "error": None}) == "failed"
    assert bench._status({"status": "completed", "error": None, "epoch_s": 1.0}) == "completed"
