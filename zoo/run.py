"""Train one run config and return its result record; ``python -m zoo.run <yaml> [key=value ...]``.

The record's ``status`` is "completed", "diverged" (non-finite loss) or "failed" (an exception,
CUDA out of memory included), always with the last test metrics that were reached (``test/*``, see zoo.lit).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from zoo.config import import_user_modules, make_run_config, plain, record_fields, run_id, validate


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _member_loggers(cfg: DictConfig, run_dir: Path, rid: str) -> list:
    """The loggers of one run: metrics.csv always, TensorBoard and wandb when the config asks."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    loggers = [CSVLogger(run_dir, name="", version="")]
    if "tensorboard" in cfg.train.loggers:
        loggers.append(TensorBoardLogger(run_dir, name="tb", version=""))
    if "wandb" in cfg.train.loggers:
        loggers.append(WandbLogger(save_dir=run_dir, name=rid, config=plain(cfg)))
    return loggers


def train(cfg: DictConfig, run_dir: Path, device: torch.device | None = None, quiet: bool = False) -> dict:
    """Train ``cfg`` with Lightning, writing logs under ``run_dir``; return the result record."""
    return train_group([cfg], [run_dir], device, quiet)[0]


def _quiet_lightning() -> None:
    """Lightning's start-up banners (accelerator, litlogger tip) and warnings that say nothing about a run."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero",
                 "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")  # config.yaml
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


def prepare_process() -> None:
    """Do ahead what a process's first group would start with: import Lightning and zoo's training modules, and
    start CUDA and cuBLAS (one small matmul). A sweep's workers call it while the sweep process checks the runs
    (``zoo.worker``)."""
    _quiet_lightning()
    for module in ("lightning.pytorch", "zoo.data", "zoo.lit"):
        importlib.import_module(module)
    if torch.cuda.is_available():
        x = torch.ones(16, 16, device="cuda", dtype=torch.bfloat16)
        (x @ x).sum().item()


def train_group(cfgs: list[DictConfig], run_dirs: list[Path], device: torch.device | None = None,
                quiet: bool = False, on_member_done=None) -> list[dict]:
    """Train runs that differ only in ``train.lr`` side by side on one data stream (see ``zoo.step``);
    return one result record per run, each as if the run had been trained alone.

    ``on_member_done(i, record)`` receives member ``i``'s final record as soon as it stops (early stop, divergence,
    timeout) while others train on, so a sweep can keep it even if the group is cut short later; the returned
    list holds that same record.

    The group's GPU memory (models, optimizer states, CUDA graphs and their pools) is handed back to the driver
    before this returns, so group after group can train in one process (a worker, a bench, a notebook's loop)."""
    try:
        return _train_group(cfgs, run_dirs, device, quiet, on_member_done)
    finally:
        release_gpu_memory()


def release_gpu_memory() -> None:
    """Free what a finished group left: its objects sit in reference cycles with Lightning's trainer, so they go
    only at a collection, and the CUDA cache keeps their blocks (a CUDA graph's private pool among them) until
    emptied. Measured on an H100: Mamba's group of 4 at MQAR N=512, d=512 left 45.7 GiB reserved, most of it its
    graphs' pools, and a second such group in the same process ran out of memory at its first graph capture."""
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


_keep_compiled = False  # set by ``keeping_compiled_code``


def forget_compiled_code() -> None:
    """Each group compiles anew (a compiled model, RWKV-7's compiled layer math): a worker trains group after group,
    and the compiled code of earlier groups' shapes would count against dynamo's recompile limit for the same
    functions.
    Nothing to forget while dynamo has compiled no frame in this process: then the reset is skipped, since on a GPU
    machine it imports Inductor's CUDA-graph trees (2.8 s of a worker's first group, measured on an H100 machine).
    Skipped too within ``keeping_compiled_code``."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    if _keep_compiled or convert_frame is None or getattr(convert_frame, "FRAME_COUNTER", 1) == 0:
        return
    torch._dynamo.reset()


@contextlib.contextmanager
def keeping_compiled_code():
    """Groups started within keep what earlier groups compiled: for a bench that trains one config twice in a
    process, a warm-up group and then the measured one, which would otherwise compile its functions again."""
    global _keep_compiled
    before, _keep_compiled = _keep_compiled, True
    try:
        yield
    finally:
        _keep_compiled = before


def _train_group(cfgs: list[DictConfig], run_dirs: list[Path], device: torch.device | None,
                 quiet: bool, on_member_done) -> list[dict]:
    _quiet_lightning()
    import lightning as L
    from lightning.pytorch.callbacks import TQDMProgressBar

    from zoo.tasks.base import IGNORE_INDEX
    from zoo import checkpoint
    from zoo.data import TaskDataModule
    from zoo.lit import MixerLM
    from zoo.spec import build_model, run_spec

    cfg = cfgs[0]
    device = device or pick_device()
    for run_dir in run_dirs:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
    import_user_modules(cfg)
    spec = run_spec(plain(cfg))  # the members differ only in lr: one task, one spec
    records = [{"id": run_id(c), **record_fields(c, spec), "status": "running", "error": None,
                "group_size": len(cfgs), "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                "started": time.time(), "epochs": 0, "history": []} for c in cfgs]
    lit = None
    reported: set[int] = set()  # members whose final record went to on_member_done
    try:
        L.seed_everything(cfg.seed, verbose=False)
        t0 = time.perf_counter()
        data = TaskDataModule(cfg, device)
        data.setup()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        data_seconds = time.perf_counter() - t0
        chances = spec.test_chances()
        labelled = {s.name: int((s.targets != IGNORE_INDEX).sum()) for s in data.test_segments}
        for c, record in zip(cfgs, records):
            record.update(segment_chance=chances, mixer_kwargs=OmegaConf.to_container(c.model.mixer_kwargs),
                          weight_decay=c.train.weight_decay)
            if chances:  # chance of the whole test split, weighted by labelled tokens
                record["chance"] = sum(chances[n] * labelled[n] for n in labelled) / sum(labelled.values())

        if device.type == "cuda":
            forget_compiled_code()
        models, rng_states = [], []
        for c, record in zip(cfgs, records):
            L.seed_everything(c.seed, verbose=False)  # each member starts exactly as its run alone would
            models.append(build_model(plain(c.model), spec.vocab_size, spec.max_seq_len))
            rng_states.append(torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state())
            record["params"] = sum(p.numel() for p in models[-1].parameters())
            record["state_size"] = models[-1].state_size(spec.max_seq_len)
            record["data_seconds"] = data_seconds
        steps = spec.steps_per_epoch(cfg.train.batch_size)
        precision = cfg.train.precision
        if precision == "auto":
            precision = "bf16" if device.type == "cuda" else "fp32"
        loggers = [_member_loggers(c, d, r["id"]) for c, d, r in zip(cfgs, run_dirs, records)]

        def log_epoch(i: int, entry: dict) -> None:
            for logger in loggers[i]:
                logger.log_metrics({k: v for k, v in entry.items() if v is not None}, step=entry["epoch"])
                logger.save()

        resume = [checkpoint.load(d) for d in run_dirs] if cfg.train.checkpoint else []
        resume = resume if resume and all(c is not None for c in resume) else None
        if resume:  # a killed run: continue after its last finished epoch
            for model, state in zip(models, resume):
                model.load_state_dict(state["model"])
            data.resume_order = resume[0]["order"]
            for i, state in enumerate(resume):
                for entry in state["history"]:  # metrics.csv is written anew from the whole history
                    log_epoch(i, entry)

        def member_done(i: int) -> None:  # MixerLM's on_stop: member i's record is final, hand it on now
            _set_outcome(records[i], lit.outcomes[i], lit.train_seconds(i), lit.resumed_at[i])
            _summarise(records[i], lit.histories[i])
            reported.add(i)
            on_member_done(i, records[i])

        lit = MixerLM(cfgs, models, [s.name for s in data.test_segments], steps, bf16=precision == "bf16",
                      on_epoch=log_epoch, rng_states=rng_states, run_dirs=run_dirs, resume=resume,
                      on_stop=member_done if on_member_done is not None else None)
        remaining = cfg.train.max_epochs - lit.epoch_offset
        show_bar = cfg.train.progress_bar and not quiet and len(cfgs) == 1
        trainer = L.Trainer(
            accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
            precision="32-true",  # MixerLM autocasts itself (see zoo.lit)
            max_epochs=max(remaining, 1), logger=False,
            callbacks=[TQDMProgressBar(refresh_rate=max(1, steps // 20))] if show_bar else [],
            enable_checkpointing=False, enable_progress_bar=show_bar, enable_model_summary=False,
            num_sanity_val_steps=0, default_root_dir=run_dirs[0],
        )
        if remaining > 0 and any(o is None for o in lit.outcomes):
            trainer.fit(lit, datamodule=data)
        for i, (record, outcome) in enumerate(zip(records, lit.outcomes)):
            if i in reported:
                continue
            _set_outcome(record, outcome or ("completed", "max_epochs reached"), lit.train_seconds(i),
                         lit.resumed_at[i])
    except Exception as err:  # recorded, never raised: one bad run must not stop a sweep
        if lit is not None:  # the checkpoints of finished epochs still go to disk: a retry resumes from them
            with contextlib.suppress(Exception):
                lit.checkpoints.wait()
        if isinstance(err, torch.cuda.OutOfMemoryError):
            err_text = f"CUDA out of memory: {str(err).splitlines()[0]}"
        else:
            err_text = "".join(traceback.format_exception(err)[-6:])
        for i, record in enumerate(records):
            if i not in reported:
                record.update(status="failed", error=err_text)
    for i, record in enumerate(records):
        if i not in reported:
            _summarise(record, lit.histories[i] if lit is not None else [])
    return records


def _set_outcome(record: dict, outcome: tuple[str, str], train_seconds: float, resumed_at: list[int]) -> None:
    """A run's final status, why it stopped (also its error unless it completed), its training time and the
    epochs it resumed from after being killed. ``train_seconds`` counts a killed attempt's training up to its
    last checkpoint, and all of the last attempt's; ``wall_seconds`` (``_summarise``) is the last attempt's alone."""
    status, reason = outcome
    record.update(status=status, stop_reason=reason, train_seconds=train_seconds, resumed_at=resumed_at,
                  error=reason if status != "completed" else None)


def _summarise(record: dict, history: list[dict]) -> None:
    """Complete a run's final ``record`` from its per-epoch ``history``: best and final accuracy, epochs, timing."""
    record["history"] = history
    record["epochs"] = len(history)
    if history:
        record["final_accuracy"] = history[-1]["test/acc"]
        # MAD's metric (zoo.evaluation.macro_accuracy), of the final model as MAD reports
        if "test/macro_acc" in history[-1]:
            record["final_macro_accuracy"] = history[-1]["test/macro_acc"]
        best = max(history, key=lambda h: h["test/acc"])
        if "chance" in record and record["chance"] < 1:
            record["chance_corrected_accuracy"] = (best["test/acc"] - record["chance"]) / (1 - record["chance"])
        record.update(accuracy=best["test/acc"], seq_accuracy=best["test/seq_acc"], best_epoch=best["epoch"],
                      segment_accuracy={k.split("/", 2)[2]: v for k, v in best.items()
                                        if k.startswith("test/acc/")})
        seconds = [h["train_seconds"] for h in history if h["train_seconds"] is not None]
        if seconds:
            record["seconds_per_epoch"] = sum(seconds) / len(seconds)
    record["finished"] = time.time()
    record["wall_seconds"] = record["finished"] - record["started"]


def load_config(path: str | None, overrides: list[str]) -> DictConfig:
    """A run config from a YAML file (or the defaults) plus omegaconf dotlist overrides, validated."""
    if path and not Path(path).exists():
        from zoo.errors import ConfigError

        raise ConfigError("config", path, "an existing YAML file")
    raw = OmegaConf.load(path) if path else OmegaConf.create()
    try:
        raw = OmegaConf.merge(raw, OmegaConf.from_dotlist(overrides))
    except Exception as err:
        from zoo.errors import ConfigError

        raise ConfigError("overrides", overrides, f"key=value pairs ({err})") from None
    cfg = make_run_config(raw)
    validate(cfg)
    return cfg


def main(argv: list[str] | None = None) -> int:
    from zoo.errors import ConfigError
    from zoo.results import Run, SweepLock, SweepLocked, check_writable, pending, prepare_run_dir, write_result

    parser = argparse.ArgumentParser(prog="python -m zoo.run", description=__doc__.splitlines()[0])
    parser.add_argument("args", nargs="+", metavar="config.yaml|key=value",
                        help="a run config YAML and/or omegaconf dotlist overrides of the defaults (at least one: "
                             "the bare defaults are a 64-epoch run of 100k examples)")
    parser.add_argument("--out", default="outputs/run",
                        help="output folder, laid out as a sweep's: runs/<id>/{config.yaml, metrics.csv, result.json} "
                             "and results.jsonl (python -m zoo.leaderboard reads it)")
    parser.add_argument("--force", action="store_true", help="train again even if this config already finished")
    args = parser.parse_intermixed_args(argv)
    path = args.args[0] if args.args and "=" not in args.args[0] else None
    out = Path(args.out)
    try:
        cfg = load_config(path, args.args[1:] if path else args.args)
        check_writable(out)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    run = Run(run_id(cfg), plain(cfg), "base")
    try:
        with SweepLock(out):  # a sweep of one run: the same skip and resume as python -m zoo.sweep
            todo, done = pending(out, [run])
            run_dir = out / "runs" / run.id
            if not todo and not args.force:
                finished = done[run.id]
                print(f"already {finished['status']}: accuracy {finished.get('accuracy', float('nan')):.4f} -> "
                      f"{run_dir} (--force trains it again)")
                return 0
            record = train(run.cfg, prepare_run_dir(out, run))
            write_result(out, record)
    except SweepLocked as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    print(f"{record['status']}: accuracy {record.get('accuracy', float('nan')):.4f} "
          f"after {record['epochs']} epochs -> {run_dir}")
    return 0 if record["status"] == "completed" else 1


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
