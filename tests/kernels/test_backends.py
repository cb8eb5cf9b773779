"""Every kernels entry: an unknown backend is a ValueError naming the allowed values, ``"naive"`` runs on CPU
and is recorded, ``"auto"`` on CPU is today's CPU path, and the fast paths that run on CPU (Triton under
the interpreter, the chunked SSD, delta rule and RWKV-7, the FFT) agree with the reference through the entry."""
import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.based import based_attention
from zoo.kernels.cross_entropy import cross_entropy
from zoo.kernels.delta_rule import delta_rule
from zoo.kernels.gatedfwa import gate_cumsum, gated_window_attention
from zoo.kernels.gla import gla
from zoo.kernels.embedding import embedding, embedding_dropout
from zoo.kernels.layer_norm import layer_norm, rms_norm
from zoo.kernels.linear import head_parts, linear
from zoo.kernels.linear_cross_entropy import linear_cross_entropy
from zoo.kernels.long_conv import long_conv
from zoo.kernels.retention import retention
from zoo.kernels.rwkv7 import rwkv7
from zoo.kernels.selective_scan import selective_scan
from zoo.kernels.shifted_linear import shifted_linear
from zoo.kernels.ssd import ssd
from zoo.kernels.token_shift import token_shift_mix
from zoo.kernels.wkv4 import wkv4

B, T, H, K = 2, 8, 2, 4


def rand(*shape):
    return torch.randn(*shape)


def neg(*shape):
    return -torch.rand(*shape)


# name -> (entry, inputs, op recorded, "auto"'s backend on CPU, fast paths that run on CPU)
ENTRIES = {
    "gate_cumsum": (gate_cumsum, lambda: (rand(B, T, H), torch.rand(B, T, H) + 0.5), "gatedfwa.gate_cumsum",
                    "naive", ["triton"]),
    "gated_window_attention": (lambda *a, backend: gated_window_attention(*a, window=3, backend=backend),
                               lambda: (rand(B, T, H, 16), rand(B, T, H, 16), rand(B, T, H, 16), neg(B, T, H).cumsum(1)),
                               "gatedfwa.attention", "naive", ["triton"]),
    "wkv4": (wkv4, lambda: (torch.rand(K) + 0.1, rand(K), rand(B, T, K), rand(B, T, K)), "wkv4", "naive", ["triton"]),
    "selective_scan": (selective_scan, lambda: (rand(B, T, K), torch.rand(B, T, K) * 0.1, neg(K, 4), rand(B, T, 4),
                                                rand(B, T, 4)), "selective_scan", "naive", ["triton"]),
    "ssd": (ssd, lambda: (rand(B, T, H, 3), torch.rand(B, T, H) * 0.1, neg(H), rand(B, T, 5), rand(B, T, 5)), "ssd",
            "naive", ["triton", "chunked"]),
    "rwkv7": (lambda *a, backend: rwkv7(*a, w_min=-0.5, backend=backend),
              lambda: (rand(B, T, H, K), -0.5 * torch.rand(B, T, H, K), rand(B, T, H, K), rand(B, T, H, K),
                       rand(B, T, H, K), rand(B, T, H, K)), "rwkv7", "naive", ["triton", "triton_chunk", "chunked"]),
    "based_attention": (based_attention, lambda: (rand(B, T, H, K), rand(B, T, H, K), rand(B, T, H, 3)), "based",
                        "naive", []),
    "gla": (gla, lambda: (rand(B, T, H, K), rand(B, T, H, K), rand(B, T, H, 3), neg(B, T, H, K)), "gla", "naive", []),
    "retention": (retention, lambda: (rand(B, T, H, K), rand(B, T, H, K), rand(B, T, H, 3)), "retention", "naive", []),
    "delta_rule": (delta_rule, lambda: (rand(B, T, H, K), rand(B, T, H, K), rand(B, T, H, 3), torch.rand(B, T, H),
                                        neg(B, T, H)), "delta_rule", "naive", ["chunked"]),
    "long_conv": (long_conv, lambda: (rand(B, T, 3), rand(T, 3), rand(3)), "long_conv", "fft", ["fft"]),
    "layer_norm": (layer_norm, lambda: (rand(B, T, 6), rand(6), rand(6)), "layer_norm", "naive", ["triton"]),
    "rms_norm": (lambda x, w, z, backend: rms_norm(x, w, 1e-6, gate=z, backend=backend),
                 lambda: (rand(B, T, H, 8), rand(8), rand(B, T, H, 8)), "rms_norm", "naive", ["triton"]),
    "embedding": (embedding, lambda: (torch.randint(0, 7, (B, T)), rand(7, 5)), "embedding", "naive", ["triton"]),
    "embedding_dropout": (lambda i, w, pos, backend: embedding_dropout(i, w, pos, 0.0, backend=backend),
                          lambda: (torch.randint(0, 7, (B, T)), rand(7, 5), rand(T, 5)), "embedding_dropout", "naive",
                          ["triton"]),  # without dropout: the draws differ between the two paths
    "linear": (linear, lambda: (rand(B, T, 6), rand(5, 6), rand(5)), "linear", "naive", ["triton"]),
    "head_parts": (lambda x, w, b, backend: torch.stack(head_parts(x, w, b, 3, H, backend=backend)),
                   lambda: (rand(B, T, 6), rand(3 * H * K, 6), rand(3 * H * K)), "head_parts", "naive", ["triton"]),
    "token_shift_mix": (lambda x, m, backend: torch.stack(token_shift_mix(x, m, backend=backend)),
                        lambda: (rand(B, T, 6), torch.rand(3, 6)), "token_shift_mix", "naive", ["triton"]),
    "shifted_linear": (lambda x, m, *ws, backend: shifted_linear(x, m, list(ws), (0, 1, 0), backend=backend),
                       lambda: (rand(B, T, 6), torch.rand(2, 6), rand(3, 6), rand(4, 6), rand(2, 6)), "shifted_linear",
                       "naive", ["folded"]),
    "cross_entropy": (cross_entropy, lambda: (rand(B * T, 11), torch.randint(0, 11, (B * T,))), "cross_entropy",
                      "naive", ["triton"]),
    "linear_cross_entropy": (linear_cross_entropy,
                             lambda: (rand(B * T, 6), rand(11, 6), torch.randint(0, 11, (B * T,))),
                             "linear_cross_entropy", "naive", ["triton"]),
}


@pytest.mark.parametrize("name", ENTRIES)
def test_unknown_backend_is_a_value_error(name):
    entry, inputs, *_ = ENTRIES[name]
    with pytest.raises(ValueError, match=r"backend='cuda' is not valid: expected one of auto, .*naive"):
        entry(*inputs(), backend="cuda")


@pytest.mark.parametrize("name", ENTRIES)
def test_naive_runs_on_cpu_and_auto_keeps_the_cpu_path(name):
    entry, inputs, op, auto, _ = ENTRIES[name]
    torch.manual_seed(0)
    args = inputs()
    backend.clear()
    want = entry(*args, backend="naive")
    assert backend.last_backend(op) == "naive" and torch.isfinite(want).all()
    got = entry(*args, backend="auto")
    assert backend.last_backend(op) == auto
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, fast", [(n, f) for n, e in ENTRIES.items() for f in e[4]])
def test_fast_paths_that_run_on_cpu_match_the_reference(name, fast):
    entry, inputs, op, *_ = ENTRIES[name]
    torch.manual_seed(0)
    args = inputs()
    got = entry(*args, backend=fast)
    assert backend.last_backend(op) == fast
    torch.testing.assert_close(got, entry(*args, backend="naive"), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["rwkv7", "delta_rule"])
def test_chunked_pytorch_paths_compute_in_float32_under_bf16_autocast(name):
    """Training autocasts to bf16; the chunked forms keep their float32 math (and their triangular solves, which
    have no bf16 version), so they give the same result with and without autocast."""
    entry, inputs, *_ = ENTRIES[name]
    torch.manual_seed(0)
    args = inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = entry(*args, backend="chunked")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, entry(*args, backend="chunked"), rtol=0, atol=0)


def test_not_compiled_functions_run_as_they_are_inside_a_compiled_caller():
    """``backend.not_compiled`` is ``torch.compiler.disable`` with dynamo imported at the first call: a compiled
    caller breaks its graph around the function, which runs eagerly (no C++ compiler needed: a graph-counting
    backend that runs the graphs as traced)."""
    seen = []

    @backend.not_compiled
    def opaque(x):
        seen.append(torch.compiler.is_compiling())
        return x * 2

    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    f = torch.compile(lambda x: opaque(x + 1) - 1, backend=count)
    assert torch.equal(f(torch.ones(3)), torch.full((3,), 3.0))
    assert seen == [False] and len(graphs) == 2  # run once, eagerly, between the two graphs


def test_importing_the_kernels_does_not_import_dynamo():
    """Importing zoo's mixers (and so their kernels) compiles nothing; importing ``torch._dynamo`` took 4.6 s of
    the 8.1 s it took on an H100 machine. It stays out until something compiles (or PyTorch itself imports it)."""
    import subprocess
    import sys

    script = "import sys, zoo.sweep, zoo.mixers; print('torch._dynamo' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_compiled_in_training_runs_uncompiled_off_the_gpu():
    """``Compiled.in_training`` compiles only a training step on a GPU: on CPU tensors, gradients on or off, it calls
    the function as written and compiles nothing."""
    fn = backend.Compiled(lambda x: x * 2, "a doubling")
    x = torch.ones(3, requires_grad=True)
    out, compiled = fn.in_training(x)
    assert not compiled and torch.equal(out, torch.full((3,), 2.0)) and out.requires_grad
    with torch.no_grad():
        assert fn.in_training(x)[1] is False
    assert fn._by_compiler == {}
