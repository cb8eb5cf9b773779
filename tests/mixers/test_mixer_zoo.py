"""Properties every mixer of the zoo must have, on CPU (reference paths), plus GPU fast path vs reference."""
import copy

import pytest
import torch

from zoo.kernels import backend
from zoo.errors import ConfigError
from zoo.model import LanguageModel
from zoo.mixers.registry import check_mixer_kwargs, get_mixer
from agreement import assert_gpu_matches_cpu
from causality import assert_causal

ZOO = ["hyena", "rwkv", "rwkv7", "mamba", "mamba2", "based"]
SMALL = {"rwkv7": {"head_dim": 16}, "mamba2": {"headdim": 16, "d_state": 16}}  # for d_model=32


def small_model(mixer, d_model=32, seed=0):
    torch.manual_seed(seed)
    return LanguageModel(64, d_model, n_layers=2, mixer=mixer, mixer_kwargs=SMALL.get(mixer), max_seq_len=32)


@pytest.mark.parametrize("mixer", ZOO)
def test_causal(mixer):
    assert_causal(small_model(mixer))


@pytest.mark.parametrize("mixer", ZOO)
def test_gradients_reach_every_mixer_parameter(mixer):
    """Every mixer parameter is on the graph. Parameters are perturbed first: references such as RWKV-7
    start some projections at zero, which zeroes the gradients upstream of them at initialisation."""
    model = small_model(mixer)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".mixer." in n:
                p.add_(0.1 * torch.randn_like(p))
    model(torch.randint(0, 64, (2, 12))).square().mean().backward()
    missing = [n for n, p in model.named_parameters() if ".mixer." in n and (p.grad is None or not p.grad.any())]
    assert not missing


# values of recurrent state per sequence of the 2-layer d_model=32 models of ``small_model`` after L tokens,
# counted by hand from each definition (conv windows keep kernel_size - 1 past inputs)
STATE_VALUES = {
    "hyena": lambda L: 2 * (L * 32 + 3 * 32 * (3 - 1)),  # the long conv's input history + short conv on 3 streams
    "rwkv": lambda L: 2 * 4 * 32,  # WKV numerator, denominator, max exponent, previous token
    "rwkv7": lambda L: 2 * (2 * 16 * 16 + 32),  # 2 heads of (16, 16) + previous token
    "mamba": lambda L: 2 * (64 * 16 + 64 * (4 - 1)),  # (E, N) SSM state + conv on E channels
    "mamba2": lambda L: 2 * (4 * 16 * 16 + (64 + 2 * 16) * (4 - 1)),  # 4 heads of (N, P) + conv on (x, B, C)
    "based": lambda L: 32 * (3 - 1) + (1 + 8 + 8 * 9 // 2) * (32 + 1),  # BaseConv, then Taylor features x (V + 1)
}


@pytest.mark.parametrize("mixer", ZOO)
@pytest.mark.parametrize("seq_len", [16, 32])
def test_state_size_counts_values(mixer, seq_len):
    assert small_model(mixer).state_size(seq_len) == STATE_VALUES[mixer](seq_len)


@pytest.mark.parametrize("mixer", ["rwkv", "rwkv7"])
def test_depth_is_not_a_user_kwarg(mixer):
    """``n_layers`` comes from the model (like ``layer_idx``), never from mixer_kwargs."""
    with pytest.raises(ConfigError, match="model.mixer_kwargs.n_layers"):
        check_mixer_kwargs(mixer, {"n_layers": 4})


@pytest.mark.parametrize("mixer, key, value", [("hyena", "emb_dim", 4), ("mamba", "d_state", 12),
                                               ("mamba2", "headdim", 48), ("based", "num_heads", 3),
                                               ("rwkv7", "head_dim", 48), ("rwkv", "init_depth", 0)])
def test_bad_kwarg_names_key_and_value(mixer, key, value):
    with pytest.raises(ConfigError, match=f"{key}={value}"):
        get_mixer(mixer)(128, **{key: value})


def test_unknown_kwarg_is_rejected():
    with pytest.raises(ConfigError, match="model.mixer_kwargs.d_state"):
        check_mixer_kwargs("rwkv", {"d_state": 4})


# the kernels op each mixer calls and the backends that count as its GPU fast path (rwkv7: fla's chunks, or where
# they are unreliable our Triton chunks, which the layer's bounded decays fit, see zoo.kernels.rwkv7)
FAST_PATHS = {"hyena": ("gated_long_conv", {"triton"}), "rwkv": ("wkv4", {"triton"}), "rwkv7": ("rwkv7", {"fla", "triton_chunk"}),
              "mamba": ("selective_scan", {"mamba_ssm", "triton"}), "mamba2": ("ssd", {"triton"}),
              "based": ("based", {"fla"}),
              # the window attention's Triton kernels (swa: without decay; gatedfwa's gate scan is asserted too)
              "swa": ("gatedfwa.attention", {"triton"}), "gatedfwa": ("gatedfwa.attention", {"triton"})}


@pytest.mark.parametrize("mixer", list(FAST_PATHS))
def test_cpu_runs_the_reference_path(mixer):
    backend.clear()
    small_model(mixer)(torch.randint(0, 64, (1, 8)))
    op, _ = FAST_PATHS[mixer]
    assert backend.last_backend(op) == backend.NAIVE


@pytest.mark.gpu
@pytest.mark.long
@pytest.mark.parametrize("mixer, autocast", [(m, True) for m in FAST_PATHS] + [("rwkv", False), ("mamba", False),
                                                                                 ("gatedfwa", False)])
@pytest.mark.parametrize("batch, seq_len", [(3, 100)])
def test_gpu_fast_path_matches_cpu_reference(mixer, batch, seq_len, autocast):
    """Same weights on CPU (reference path, float32) and GPU (fast path): outputs and all gradients agree.
    bf16 autocast (training's path) for every mixer; float32 too where the fast path is our own Triton kernel."""
    torch.manual_seed(0)
    cpu = LanguageModel(256, 128, n_layers=2, mixer=mixer, max_seq_len=128)
    gpu = copy.deepcopy(cpu).cuda()
    ids = torch.randint(0, 256, (batch, seq_len))
    out_cpu = cpu(ids)
    op, fast = FAST_PATHS[mixer]
    backend.clear()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        out_gpu = gpu(ids.cuda())
    assert backend.last_backend(op) in fast, f"{op} ran on {backend.last_backend(op)}, not {fast}"
    if mixer == "gatedfwa":
        assert backend.last_backend("gatedfwa.gate_cumsum") == "triton"
    if mixer == "hyena":
        assert backend.last_backend("implicit_filter") == "triton"
    assert_gpu_matches_cpu(cpu, gpu, out_cpu, out_gpu, tol=5e-2 if autocast else 5e-3)
