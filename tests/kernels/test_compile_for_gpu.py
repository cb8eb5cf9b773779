"""Every Triton kernel the mixers launch also compiles for a GPU, checked on a CPU machine.

The CPU tests run the kernels under Triton's interpreter, which executes their Python and never compiles them, so a
kernel can pass every CPU test and still fail to compile on the GPU (a type the compiler refuses, a loop-carried
value that changes type). Here each of zoo's mixers trains a step of a tiny model with each op forced onto its
Triton path, in float32 and under bf16 autocast, through the interpreter (a kernel no mixer launches is called
directly), while every kernel launch is recorded
(its argument types, constexprs and launch options); then a subprocess without the interpreter compiles each recorded specialization for Hopper (sm_90) with
the ptxas that ships with Triton. Block sizes are the interpreter's small ones, not the GPU's tuned ones: what is
checked is that the code compiles, not how fast it runs.
"""
import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zoo.kernels import backend as kernel_backend
from zoo.kernels.attention import attention_at_rows
from zoo.kernels.cross_entropy import cross_entropy
from zoo.kernels.embedding import embedding_dropout
from zoo.kernels.layer_norm import embedding_layer_norm
from zoo.kernels.linear.streaming import project_triton
from zoo.kernels.rwkv7 import rwkv7
from zoo.mixers.registry import get_mixer, list_mixers
from zoo.model import LanguageModel

KERNELS = Path(kernel_backend.__file__).resolve().parent
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
POINTER_TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64",
                 torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
                 torch.bool: "i1"}

COMPILE = r'''
import importlib, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
failures = []
for spec in json.load(sys.stdin):
    kernel = getattr(importlib.import_module(spec["module"]), spec["name"])
    while not isinstance(kernel, triton.runtime.jit.JITFunction):  # autotune / heuristics wrappers
        kernel = kernel.fn
    try:
        source = ASTSource(kernel, spec["signature"], constexprs=spec["constexprs"])
        triton.compile(source, target=GPUTarget("cuda", 90, 32), options=spec["options"])
    except Exception as err:  # noqa: BLE001 - every compile error is a finding
        failures.append(f"{spec['module']}.{spec['name']} {spec['signature']} {spec['constexprs']}: "
                        f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}")
print(json.dumps(failures))
'''


def arg_type(value):
    """The Triton signature type of a runtime kernel argument."""
    if isinstance(value, torch.Tensor):
        return "*" + POINTER_TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2 ** 31 <= value < 2 ** 31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no Triton type for {type(value).__name__}")


def record_launches(monkeypatch) -> list[dict]:
    """Record every interpreted kernel launch as a compile spec (module, name, signature, constexprs, options)."""
    from triton.runtime.interpreter import InterpretedFunction

    specs, run = [], InterpretedFunction.run

    def recording_run(self, *args, grid, warmup, **kwargs):
        params = inspect.signature(self.fn).parameters
        options = {k: kwargs.pop(k) for k in LAUNCH_OPTIONS if k in kwargs}
        values = dict(zip(self.arg_names, args)) | kwargs
        signature, constexprs = {}, {}
        for name, value in values.items():
            if "constexpr" in str(params[name].annotation) or value is None:
                signature[name], constexprs[name] = "constexpr", value
            else:
                signature[name] = arg_type(value)
        specs.append({"module": self.fn.__module__, "name": self.fn.__name__, "signature": signature,
                      "constexprs": constexprs, "options": options})
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", recording_run)
    return specs


def force_triton(monkeypatch) -> None:
    """``backend="auto"`` takes zoo's own fast paths on CPU tensors (and no optional package's)."""
    def fast_module(name, purpose, x):
        return kernel_backend.Opaque(importlib.import_module(name)) if name.startswith("zoo.kernels") else None

    def named_or_gpu(backend, name, x):
        return backend in (name, "auto")

    monkeypatch.setattr(kernel_backend, "fast_module", fast_module)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("zoo.kernels") and hasattr(module, "named_or_gpu"):
            monkeypatch.setattr(module, "named_or_gpu", named_or_gpu)


def kernel_modules() -> set[str]:
    """The modules of zoo.kernels that define a Triton kernel launched from Python (not only device helpers)."""
    found = set()
    for path in KERNELS.rglob("*.py"):
        text = path.read_text()
        if "@triton.jit" in text and "](" in text:
            found.add("zoo.kernels." + ".".join(path.relative_to(KERNELS).with_suffix("").parts))
    return found


def test_every_launched_triton_kernel_compiles_for_sm90(monkeypatch):
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("records launches through Triton's interpreter (CPU test runs)")
    probe = subprocess.run([sys.executable, "-c", "from triton.backends.nvidia.compiler import CUDABackend"],
                           capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "0"})
    if probe.returncode:
        pytest.skip(f"Triton's NVIDIA backend does not import here: {probe.stderr.strip().splitlines()[-1:]}")
    force_triton(monkeypatch)
    specs = record_launches(monkeypatch)
    torch.manual_seed(0)
    ids = torch.randint(0, 16, (2, 16))
    # zoo's own mixers (other tests register misbehaving ones in this process, one of which ends it)
    # (with embedding dropout, and the training loss beside the loss alone of the logits)
    for mixer in [m for m in list_mixers() if get_mixer(m).__module__.startswith("zoo.mixers.")]:
        model = LanguageModel(16, 64, n_layers=2, mixer=mixer, max_seq_len=16, embed_dropout=0.1)
        for bf16 in (False, True):  # float32 runs, and the dtypes training sees under bf16 autocast on a GPU
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                hidden = model(ids)
                loss = model.loss(hidden, ids, -100) + cross_entropy(model.logits(hidden).flatten(0, 1), ids.flatten())
            loss.backward()
    # kernels no mixer launches: RWKV-7's fused recurrence, which decays without a bound take (the layer's are
    # bounded and take the chunked kernels); float32, and the layer's dtypes under bf16 autocast (w in float32)
    for dtype in (torch.float32, torch.bfloat16):
        r, k, v, a, b = (torch.randn(1, 5, 1, 4).to(dtype).requires_grad_() for _ in range(5))
        w = (-torch.rand(1, 5, 1, 4)).requires_grad_()
        rwkv7(r, w, k, v, a, b, backend="triton").sum().backward()
    # the projections' streaming forward, which runs for 16-bit CUDA tensors alone (the model above ran in float32
    # or on a CPU): bf16 and fp16, with and without a bias
    for dtype in (torch.bfloat16, torch.float16):
        x, weight = torch.randn(70, 24).to(dtype), torch.randn(40, 24).to(dtype)
        for bias in (None, torch.randn(40).to(dtype)):
            project_triton(x, weight, bias)
    # the first norm gathering the embedding's rows (the model above ran it with dropout and learned positions):
    # without dropout (a model in eval, or embed_dropout 0), with positions and without, float32 and under bf16
    # autocast; and the embedding dropout op alone, which a model takes only for rows too wide for the norm's kernel
    table, positions, gain, shift = (torch.randn(*s).requires_grad_() for s in ((16, 64), (16, 64), (64,), (64,)))
    for update in (positions, None):
        for bf16 in (False, True):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                total, y = embedding_layer_norm(ids, table, update, gain, shift, backend="triton")
            (total.sum() + y.float().sum()).backward()
        embedding_dropout(ids, table, update, 0.1, backend="triton").sum().backward()
    # attention from the labelled rows, which the model above did not ask for (no positions): causal with dropout,
    # and windowed with a key bias (GatedFWA's), float32 and bf16
    positions = torch.tensor([[3, 9, 15], [0, 7, 12]])
    for dtype in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(*s).to(dtype).requires_grad_() for s in ((2, 3, 2, 16), (2, 16, 2, 16), (2, 16, 2, 16)))
        key_bias = torch.randn(2, 16, 2).requires_grad_()
        attention_at_rows(q, k, v, positions, dropout_p=0.1, backend="triton").float().sum().backward()
        attention_at_rows(q, k, v, positions, 5, key_bias, backend="triton").float().sum().backward()
    assert {s["module"] for s in specs} == kernel_modules()  # every kernel module ran (a new one needs a driver)
    unique = list({json.dumps(s, sort_keys=True): s for s in specs}.values())
    done = subprocess.run([sys.executable, "-c", COMPILE], input=json.dumps(unique), capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "0"}, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(failures)
