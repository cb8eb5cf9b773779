"""The configuration of one training run, its validation, and its stable id.

A run config has four sections (YAML, read with omegaconf)::

    task:  {name, params: {...common task parameters...}, train: [segments], test: [segments]}
    model: {d_model, n_layers, mixer, mixer_kwargs, state_mixer, positions, init, dropout}
    train: {batch_size, max_epochs, lr, ...}
    seed, imports

A segment is a dict of task-parameter overrides plus ``num_examples``; a split with several
segments mixes several (N, kv) settings, and accuracy is reported per segment too.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from zoo.errors import ConfigError

PRECISIONS = ("auto", "bf16", "fp32")
LOGGERS = ("csv", "tensorboard", "wandb")
DECAY_GROUPS = ("all", "matrices")


@dataclass
class TaskConfig:
    name: str = "mqar"
    params: dict = field(default_factory=dict)
    train: list = field(default_factory=lambda: [{"num_examples": 100_000}])
    test: list = field(default_factory=lambda: [{"num_examples": 3_000}])


@dataclass
class ModelConfig:
    mixer: str = "softmax"
    d_model: int = 128
    n_layers: int = 2
    mixer_kwargs: dict = field(default_factory=dict)
    state_mixer: str = "identity"
    # Options every mixer shares; the defaults are Zoology's figure-2 setup (README, "Model setup").
    positions: Optional[str] = None  # learned | rope | none; None: the mixer's default (attention: learned)
    init: str = "zoology"  # zoology: N(0, 0.02) on every Linear and Embedding; mixer: each mixer's own
    dropout: float = 0.1  # attention dropout, for mixers that take it (Zoology's attention: 0.1)


@dataclass
class TrainConfig:
    batch_size: int = 64
    eval_batch_size: Optional[int] = None  # None: same as batch_size
    max_epochs: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.1
    decay_params: str = "all"  # Zoology decays every parameter; "matrices" spares biases, norms, embeddings
    betas: list = field(default_factory=lambda: [0.9, 0.999])
    warmup_epochs: float = 0.0
    min_lr_ratio: float = 0.0
    grad_clip: Optional[float] = None
    early_stop_accuracy: Optional[float] = 0.99  # None: always run max_epochs
    precision: str = "auto"  # auto: bf16 autocast on GPU, fp32 on CPU
    compile: bool = False  # torch.compile the model
    cuda_graphs: bool = False  # on GPU, replay each training step from a CUDA graph (off when compile is on)
    loggers: list = field(default_factory=lambda: ["csv"])
    progress_bar: bool = True


@dataclass
class RunConfig:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0
    imports: list = field(default_factory=list)  # user modules that register mixers or tasks


def _check_keys(raw, schema, prefix: str = "") -> None:
    """Reject keys that the dataclass ``schema`` (or a nested one) does not have."""
    fields = schema.__dataclass_fields__
    for key in raw:
        if key not in fields:
            raise ConfigError(f"{prefix}{key}", raw[key], list(fields))
        sub = fields[key].default_factory if callable(fields[key].default_factory) else None
        if sub is not None and hasattr(sub, "__dataclass_fields__") and isinstance(raw[key], (dict, DictConfig)):
            _check_keys(raw[key], sub, f"{prefix}{key}.")


def make_run_config(raw: dict | DictConfig) -> DictConfig:
    """Merge ``raw`` onto the defaults, rejecting unknown keys and values of the wrong type."""
    _check_keys(raw, RunConfig)
    try:
        return OmegaConf.merge(OmegaConf.structured(RunConfig), raw)
    except OmegaConfBaseException as err:
        key = str(getattr(err, "full_key", "") or "?")
        raise ConfigError(key, OmegaConf.select(OmegaConf.create(raw), key, default=None),
                          str(err).splitlines()[0]) from None


def import_user_modules(cfg: DictConfig) -> None:
    """Import the modules named in ``imports``, which register the user's own mixers and tasks."""
    for module in cfg.imports:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError("imports", module, f"an importable module ({err})") from None


def validate(cfg: DictConfig) -> None:
    """Check everything that can be checked before training: names, kwargs, task parameters."""
    from tasks import get_task
    from zoo.registry import check_mixer_kwargs

    import_user_modules(cfg)
    t = cfg.train
    for key, value, allowed in (("train.precision", t.precision, PRECISIONS),
                                ("train.decay_params", t.decay_params, DECAY_GROUPS)):
        if value not in allowed:
            raise ConfigError(key, value, list(allowed))
    for logger in t.loggers:
        if logger not in LOGGERS:
            raise ConfigError("train.loggers", logger, list(LOGGERS))
    for key in ("batch_size", "max_epochs"):
        if t[key] < 1:
            raise ConfigError(f"train.{key}", t[key], "an integer >= 1")
    if not t.lr > 0:
        raise ConfigError("train.lr", t.lr, "a number > 0")
    if t.early_stop_accuracy is not None and not 0 < t.early_stop_accuracy <= 1:
        raise ConfigError("train.early_stop_accuracy", t.early_stop_accuracy, "a number in (0, 1] or null")
    m = cfg.model
    for key in ("d_model", "n_layers"):
        if m[key] < 1:
            raise ConfigError(f"model.{key}", m[key], "an integer >= 1")
    check_mixer_kwargs(m.mixer, OmegaConf.to_container(m.mixer_kwargs))
    task_cls = get_task(cfg.task.name)
    accepted = [p for p in inspect.signature(task_cls.__init__).parameters if p != "self"]
    for split in ("train", "test"):
        if not cfg.task[split]:
            raise ConfigError(f"task.{split}", [], "a non-empty list of segments")
        for i, segment in enumerate(cfg.task[split]):
            key = f"task.{split}[{i}]"
            if "num_examples" not in segment or int(segment["num_examples"]) < 1:
                raise ConfigError(f"{key}.num_examples", segment.get("num_examples"), "an integer >= 1")
            params = task_params(cfg, segment)
            for name in params:
                if name not in accepted:
                    raise ConfigError(f"{key}.{name}", params[name], accepted)
            task_cls(**params)  # the task rejects impossible values itself
    _check_model_builds(cfg)


def _check_model_builds(cfg: DictConfig) -> None:
    """Construct the model on the meta device (no memory, no compute) so mixers can reject values."""
    from zoo.model import LanguageModel

    try:
        LanguageModel.from_config(cfg, device="meta")
    except ConfigError:
        raise
    except Exception as err:  # a mixer that rejects its arguments with a plain exception
        kwargs = OmegaConf.to_container(cfg.model.mixer_kwargs)
        raise ConfigError("model.mixer_kwargs", kwargs, f"arguments {cfg.model.mixer!r} accepts ({err})") from None


def task_params(cfg: DictConfig, segment) -> dict:
    """The task parameters of one segment: the common ``task.params`` overridden by the segment."""
    params = {**OmegaConf.to_container(cfg.task.params), **dict(segment)}
    params.pop("num_examples", None)
    return params


def _segment_tasks(cfg: DictConfig) -> list:
    from tasks import get_task

    task_cls = get_task(cfg.task.name)
    return [task_cls(**task_params(cfg, s)) for s in list(cfg.task.train) + list(cfg.task.test)]


def max_seq_len(cfg: DictConfig) -> int:
    """The longest input over every train and test segment (sizes position tables and filters)."""
    return max(t.seq_len for t in _segment_tasks(cfg))


def vocab_size(cfg: DictConfig) -> int:
    """The model vocabulary: the largest over every segment."""
    return max(t.vocab_size for t in _segment_tasks(cfg))


def run_id(cfg: DictConfig) -> str:
    """A stable 12-hex-digit hash of the resolved config (key order does not matter)."""
    container = OmegaConf.to_container(cfg, resolve=True)
    blob = json.dumps(container, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def to_plain(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)
