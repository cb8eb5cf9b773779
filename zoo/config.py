"""The configuration of one training run: its schema, its validation, and its stable id.

A run config has four sections (YAML, read with omegaconf)::

    task:  {name, params: {...common task parameters...}, train: [segments], test: [segments]}
    model: {d_model, n_layers, mixer, mixer_kwargs, state_mixer, positions, init, dropout, embed_dropout}
    train: {batch_size, max_epochs, lr, ...}
    seed, imports

A segment is a dict of task-parameter overrides plus ``num_examples``; a split with several
segments mixes several (N, kv) settings, and accuracy is reported per segment too. Segments are
checked where a split is planned (``zoo.tasks.split``, through ``zoo.spec.run_spec``), ``num_examples``
included, and what a run needs from them is resolved there once (``zoo.spec.RunSpec``).

Every key has a type and a range, declared once in the pydantic models below (strict: ``"512"`` is
not an integer, ``1`` is not a boolean). Task parameters are checked by the task class, mixer
kwargs by the mixer's constructor signature (names and annotated types), and the mixer's output
shape by one forward pass on the meta device (no memory, no compute). Every failure is a
``ConfigError`` naming the key, the value and what is allowed, raised before any training.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import typing
from typing import Annotated, Any, Literal, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from zoo.errors import ConfigError
from zoo.spec import RunSpec, build_model, run_spec

PositiveInt = Annotated[int, Field(ge=1)]
Number = Annotated[float, Field(allow_inf_nan=False)]
SHAPE_CHECK_LEN = 8  # the sequence length of the meta forward that checks a mixer's output shape
LOGGER_PACKAGES = {"csv": (), "tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",)}


def _importable_logger(name: str) -> str:
    packages = LOGGER_PACKAGES[name]
    if packages and not any(importlib.util.find_spec(p) for p in packages):
        raise ValueError(f"a logger whose package is installed (pip install {packages[0]})")
    return name


class Schema(BaseModel):
    """Unknown keys are errors; values must already have their type (no "512" -> 512)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class TaskConfig(Schema):
    name: str = "mqar"
    params: dict[str, Any] = {}
    # segments: ``num_examples`` plus task parameters that override ``params`` (checked in zoo.spec.run_spec)
    train: Annotated[list[dict[str, Any]], Field(min_length=1)] = [{"num_examples": 100_000}]
    test: Annotated[list[dict[str, Any]], Field(min_length=1)] = [{"num_examples": 3_000}]


class LayerConfig(Schema):
    """One layer's override of ``model.mixer`` / ``model.mixer_kwargs`` (``model.layers``, a hybrid model)."""

    mixer: Optional[str] = None  # None: model.mixer
    mixer_kwargs: Optional[dict[str, Any]] = None  # None: model.mixer_kwargs if the mixer is model.mixer, else {}


class ModelConfig(Schema):
    mixer: str = "softmax"
    d_model: PositiveInt = 128
    n_layers: PositiveInt = 2
    mixer_kwargs: dict[str, Any] = {}
    state_mixer: Literal["identity", "normed", "mlp"] = "identity"  # "normed": Zoology's block (zoo.model.STATE_MIXERS)
    # Options every mixer shares; the defaults are Zoology's figure-2 setup (README, "Model setup").
    positions: Optional[Literal["learned", "rope", "none"]] = None  # None: the mixer's default (attention: learned)
    init: Literal["zoology", "mixer"] = "zoology"  # zoology: N(0, 0.02) on every Linear and Embedding; mixer: its own
    dropout: Annotated[Number, Field(ge=0, lt=1)] = 0.1  # attention dropout, for mixers that take it (Zoology: 0.1)
    # dropout on the embeddings (and learned positions) before the first block (Zoology: 0.1). The sweeps whose results
    # are committed set 0, the value they were trained with before this key existed (README, "Model setup")
    embed_dropout: Annotated[Number, Field(ge=0, lt=1)] = 0.1
    layers: Optional[list[LayerConfig]] = None  # n_layers per-layer overrides (a hybrid model); None: none
    backbone: Literal["lm", "autoencoder"] = "lm"  # the one the task needs; autoencoder: MAD's (zoo/autoencoder.py)


class TrainConfig(Schema):
    batch_size: PositiveInt = 64
    eval_batch_size: Optional[PositiveInt] = None  # None: same as batch_size
    max_epochs: PositiveInt = 64
    lr: Annotated[Number, Field(gt=0)] = 1e-3
    weight_decay: Annotated[Number, Field(ge=0)] = 0.1
    # Zoology decays every parameter; "matrices" spares biases, norms, embeddings
    decay_params: Literal["all", "matrices"] = "all"
    betas: Annotated[list[Annotated[Number, Field(ge=0, lt=1)]], Field(min_length=2, max_length=2)] = [0.9, 0.999]
    warmup_epochs: Annotated[Number, Field(ge=0)] = 0.0  # at most max_epochs (checked in check_run)
    min_lr_ratio: Annotated[Number, Field(ge=0, le=1)] = 0.0
    grad_clip: Optional[Annotated[Number, Field(gt=0)]] = None  # None: no clipping
    early_stop_accuracy: Optional[Annotated[Number, Field(gt=0, le=1)]] = 0.99  # None: always run max_epochs
    precision: Literal["auto", "bf16", "fp32"] = "auto"  # auto: bf16 autocast on GPU, fp32 on CPU
    # on GPU, torch.compile each model's forward (fuses the elementwise work around the mixers; ignored on CPU,
    # where it would mostly time the C++ compiler). A forward that fails to compile trains uncompiled, saying so.
    # H100, figure-2 cell, one step with CUDA graphs: softmax 3.49 -> 2.15 ms, gatedfwa 7.50 -> 3.03, hyena
    # 10.96 -> 7.58, rwkv 6.17 -> 3.13, based 3.95 -> 2.43, mamba 12.27 -> 8.15 (python -m zoo.bench.step
    # --compile); MQAR figure-2 epoch 1.47 -> 0.82 s (python -m zoo.bench --sections zoology). Off by default: it
    # is not yet tried across the sweeps' mixers (the "Offset increment outside graph capture" failure once
    # blamed on it was a graph re-recording bug, results/graph_replay_crash.md), and the default enters run ids.
    compile: bool = False
    # on GPU, replay each training step from a CUDA graph; measured on an H100 at the figure-2 cell (uncompiled):
    # softmax 3.65 -> 1.46 s per epoch, gatedfwa 7.08 -> 3.10 (zoo.bench.profile)
    cuda_graphs: bool = True
    loggers: list[Annotated[Literal["csv", "tensorboard", "wandb"], AfterValidator(_importable_logger)]] = ["csv"]
    progress_bar: bool = True
    timeout: Optional[Annotated[Number, Field(gt=0)]] = None  # wall seconds per run; None: no limit
    checkpoint: bool = True  # save at the end of each epoch so a killed run resumes


class RunConfig(Schema):
    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0  # the range Lightning's seed_everything takes
    imports: list[str] = []  # user modules that register mixers or tasks; importing them runs their code


def _model_at(schema: type, path: list[str]) -> type | None:
    """The schema class reached by following ``path`` (field names) from ``schema``, if any."""
    for name in path:
        field = getattr(schema, "model_fields", {}).get(name)
        if field is None:
            return None
        schema = field.annotation
        while typing.get_origin(schema) in (list, typing.Union, Annotated):
            schema = typing.get_args(schema)[0]
    return schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None


def error_key(loc: tuple) -> str:
    """``("task", "train", 0, "num_examples")`` -> ``task.train[0].num_examples``; a trailing index is
    dropped, so a bad list item is reported under the list's key, with the item as the value."""
    parts: list[str] = []
    for i, p in enumerate(loc):
        if isinstance(p, int):
            if i < len(loc) - 1 and parts:
                parts[-1] += f"[{p}]"
        else:
            parts.append(str(p))
    return ".".join(parts)


def schema_error(err: ValidationError, schema: type, prefix: str = "") -> ConfigError:
    """The first error of a pydantic validation as a ``ConfigError`` (key, value, what is allowed)."""
    e = err.errors(include_url=False)[0]
    names = [p for p in e["loc"] if isinstance(p, str)]
    if e["type"] == "extra_forbidden":
        parent = _model_at(schema, names[:-1])
        allowed = list(parent.model_fields) if parent else "no such key"
    elif e["type"] == "missing":
        parent = _model_at(schema, names[:-1])
        field = parent.model_fields.get(names[-1]) if parent else None
        allowed = f"{(field and field.description) or 'a value'} (required)"
    elif e["type"] == "too_short" and e.get("ctx", {}).get("min_length") == 1:
        allowed = "a non-empty list"
    else:
        allowed = e["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
        if e["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            allowed = f"a number {allowed}"
    return ConfigError(prefix + error_key(e["loc"]), e.get("input"), allowed)


def plain(raw) -> Any:
    """A plain container from a DictConfig (interpolations resolved) or a plain value."""
    if OmegaConf.is_config(raw):
        try:
            return OmegaConf.to_container(raw, resolve=True)
        except OmegaConfBaseException as err:
            key = str(getattr(err, "full_key", "") or "?")
            raise ConfigError(key, "?", f"a value that resolves ({str(err).splitlines()[0]})") from None
    return raw


def resolve(raw) -> dict:
    """``raw`` (dict or DictConfig) merged onto the defaults and type-checked: a plain dict."""
    raw = plain(raw)
    if not isinstance(raw, dict):
        raise ConfigError("config", raw, "a mapping of task, model, train, seed, imports")
    try:
        return RunConfig.model_validate(raw).model_dump()
    except ValidationError as err:
        raise schema_error(err, RunConfig) from None


def make_run_config(raw: dict | DictConfig) -> DictConfig:
    """Merge ``raw`` onto the defaults, rejecting unknown keys and values of the wrong type or range."""
    return OmegaConf.create(resolve(raw))


def import_user_modules(cfg) -> None:
    """Import the modules named in ``imports``, which register the user's own mixers and tasks.

    Importing a module runs its code: a sweep file's ``imports`` are trusted like a script."""
    for module in plain(cfg)["imports"]:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError("imports", module, f"an importable module ({err})") from None


def _canon(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def validate(cfg) -> RunSpec:
    """Check everything that can be checked before training (see ``check_run``); return the run's spec."""
    return check_run(plain(cfg))


def check_run(run: dict) -> RunSpec:
    """Check a resolved run config (``resolve``'s output): names, kwargs, task parameters, the model;
    return what the run needs from its task (``zoo.spec.RunSpec``), resolved once.

    The costly checks are cached by their inputs, so a sweep of many runs that share tasks and
    models checks each distinct task and model once."""
    import_user_modules(run)
    t = run["train"]
    if t["warmup_epochs"] > t["max_epochs"]:
        raise ConfigError("train.warmup_epochs", t["warmup_epochs"], f"a number <= train.max_epochs ({t['max_epochs']})")
    m = run["model"]
    _check_mixer_kwargs(m["mixer"], _canon(m["mixer_kwargs"]))
    from zoo.model import layer_mixers

    for i, (mixer, kwargs) in enumerate(layer_mixers(m["mixer"], m["mixer_kwargs"], m["n_layers"], m["layers"])):
        if m["layers"] is not None:
            try:
                _check_mixer_kwargs(mixer, _canon(kwargs))
            except ConfigError as err:
                raise ConfigError(f"model.layers[{i}].{err.key.removeprefix('model.')}", err.value, err.allowed) from None
    spec = run_spec(run)
    from zoo.tasks import get_task

    needed = get_task(run["task"]["name"]).backbone
    if m["backbone"] != needed:
        raise ConfigError("model.backbone", m["backbone"], f"{needed!r} (task {run['task']['name']!r})")
    _check_model(_canon(m), spec.vocab_size, spec.max_seq_len)
    return spec


def check_mixer_kwargs(mixer: str, kwargs: dict, key: str = "model.mixer_kwargs") -> None:
    """Names the mixer's constructor takes, with the types it annotates (strict, like the schema)."""
    from zoo.mixers.registry import check_mixer_kwargs as check_names, get_mixer

    check_names(mixer, kwargs, key)
    hints = _constructor_hints(get_mixer(mixer))
    for name, value in kwargs.items():
        if name in hints:
            try:
                hints[name].validate_python(value)
            except ValidationError as err:
                raise schema_error(err, Schema, f"{key}.{name}") from None


@functools.lru_cache(maxsize=4096)
def _check_mixer_kwargs(mixer: str, kwargs_json: str) -> None:
    check_mixer_kwargs(mixer, json.loads(kwargs_json))


@functools.lru_cache(maxsize=None)
def _constructor_hints(cls: type) -> dict[str, TypeAdapter]:
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that cannot be resolved: names are still checked
        return {}
    strict = ConfigDict(strict=True, arbitrary_types_allowed=True)
    return {name: TypeAdapter(hint, config=strict) for name, hint in hints.items() if name != "return"}


@functools.lru_cache(maxsize=4096)
def _check_model(model_json: str, vocab: int, seq_len: int) -> None:
    """Build the model on the meta device (no memory, no compute) so mixers can reject values, then
    run each mixer once on a short meta input: its output must have its input's shape [B, L, D].
    (Short, because a meta tensor op costs as much Python as a real one and recurrent references
    loop over L.)"""
    import torch

    m = json.loads(model_json)
    try:
        model = build_model(m, vocab, seq_len, device="meta")
    except ConfigError:
        raise
    except Exception as err:  # a mixer that rejects its arguments with a plain exception
        raise ConfigError("model.mixer_kwargs", m["mixer_kwargs"],
                          f"arguments {m['mixer']!r} accepts ({err})") from None
    x = torch.empty(2, min(seq_len, SHAPE_CHECK_LEN), m["d_model"], device="meta")
    layer_state: dict = {}
    for block in getattr(model, "encoder", model).blocks:  # an AutoEncoder's mixers are its encoder's
        try:
            y = block.mixer(x, layer_state) if block.passes_layer_state else block.mixer(x)
        except Exception:  # ops without a meta kernel: the worker will run (and record) it for real
            return
        if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(x.shape):
            got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise ConfigError("model.mixer", m["mixer"], f"a mixer whose forward maps [B, L, D] = {tuple(x.shape)} "
                                                         f"to the same shape, not {got}")


def segment_params(run: dict, segment: dict) -> dict:
    """The task parameters of one segment of a plain run config."""
    params = {**run["task"]["params"], **segment}
    params.pop("num_examples", None)
    return params


# Keys added to the config after results were committed, with the value every earlier run had. At that value a key
# stays out of run ids and of records' ``settings``, so the earlier runs keep their ids (a sweep still finds them
# finished) and the leaderboard still groups them with the new runs of the same setting.
ADDED_KEYS = {("model", "embed_dropout"): 0.0}


def _without_added_defaults(run: dict) -> dict:
    """``run`` (a plain config) without the ``ADDED_KEYS`` that hold their earlier runs' value."""
    run = dict(run)
    for (section, key), value in ADDED_KEYS.items():
        if isinstance(run.get(section), dict) and key in run[section] and run[section][key] == value:
            run[section] = {k: v for k, v in run[section].items() if k != key}
    return run


def run_id(cfg) -> str:
    """A stable 12-hex-digit hash of the resolved config (key order does not matter; ``ADDED_KEYS`` at their
    earlier value left out)."""
    return hashlib.sha256(_canon(_without_added_defaults(plain(cfg))).encode()).hexdigest()[:12]


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}``; lists become JSON text (hashable, one cell)."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = _canon(value) if isinstance(value, (list, dict)) else value
    return flat


def settings_config(settings: dict[str, Any]) -> dict:
    """A record's ``settings`` (``record_fields``) back to the resolved plain config of its run: the inverse of
    ``flatten``, the ``ADDED_KEYS`` a record leaves out set to their earlier value, then ``resolve``d (so a key
    zoo no longer knows is a ``ConfigError``). ``run_id`` of the result is the record's id."""
    run: dict = {}
    for key, value in settings.items():
        if isinstance(value, str) and value[:1] in "[{":  # flatten's JSON text of a list or an empty mapping
            decoded = json.loads(value)
            value = decoded if _canon(decoded) == value else value
        *sections, leaf = key.split(".")
        node = run
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = value
    for (section, key), value in ADDED_KEYS.items():
        run.setdefault(section, {}).setdefault(key, value)
    return resolve(run)


def record_fields(cfg, spec: RunSpec) -> dict[str, Any]:
    """What a run's result record says about its config (and its ``spec``), for the leaderboard and for humans.

    ``seq_len`` is the longest *training* input (S5 tests at other lengths); ``settings`` is every
    key of the config, flattened (``train.lr``, ``task.params.num_kv_pairs``, ...), so a leaderboard
    can keep apart whatever a sweep varied."""
    from zoo.model import mixer_label

    run = plain(cfg)
    m = run["model"]
    return {"task": run["task"]["name"], "mixer": mixer_label(m["mixer"], m["n_layers"], m["layers"]),
            "d_model": m["d_model"],
            "n_layers": run["model"]["n_layers"], "lr": run["train"]["lr"], "seed": run["seed"],
            "seq_len": spec.train_seq_len, "num_train_examples": spec.num_train_examples,
            "task_params": segment_params(run, run["task"]["train"][0]),
            "settings": flatten(_without_added_defaults(run))}
