"""RWKV-7: v_first's path through the model; the layer's elementwise math compiled and not (the recurrence is tested in
tests/kernels/test_rwkv7.py)."""
from contextlib import nullcontext
from unittest.mock import patch

import pytest
import torch

from zoo.kernels import backend
from zoo.mixers.rwkv7 import READ_OUT_COMPILED, RECURRENCE_INPUTS_COMPILED, RWKV7, read_out, recurrence_inputs
from zoo.model import LanguageModel


def test_first_layer_values_reach_later_layers():
    torch.manual_seed(0)
    layer1 = RWKV7(32, layer_idx=1, head_dim=16)
    torch.nn.init.normal_(layer1.o_proj.weight)  # it starts at zero, as in fla
    x = torch.randn(2, 8, 32)
    v_first = torch.randn(2, 8, 32)
    assert not torch.allclose(layer1(x, {"v_first": v_first}), layer1(x, {"v_first": 2 * v_first}))
    model = LanguageModel(64, 32, n_layers=2, mixer="rwkv7", mixer_kwargs={"head_dim": 16}, max_seq_len=16)
    seen = {}
    model.blocks[1].mixer.register_forward_pre_hook(lambda m, args: seen.update(args[1]))
    model(torch.randint(0, 64, (2, 8)))
    assert seen["v_first"].shape == (2, 8, 32)


def layer_inputs(first: bool, device="cpu", dtype=torch.float32, B=2, L=8, D=32, H=2):
    """recurrence_inputs's arguments (the later layers' v_first, v_up and v_bias unless ``first``) and read_out's
    other tensors."""
    torch.manual_seed(0)
    t = lambda *shape: torch.randn(*shape, device=device, dtype=dtype)  # noqa: E731
    ranks = (4, 4, 8) + (() if first else (4,))
    proj = t(B, L, 3 * D + sum(ranks))
    w_up, a_up, g_up = (torch.randn(D, rank, device=device) for rank in ranks[:3])
    v_first, v_up = (None, None) if first else (t(B, L, D), torch.randn(D, ranks[3], device=device))
    w_bias, a_bias, v_bias, k_k, k_a = (torch.randn(D, device=device) for _ in range(5))
    inputs = (proj, w_up, w_bias, a_up, a_bias, g_up, v_first, v_up, None if first else v_bias, k_k, k_a,
              torch.randn(H, D // H, device=device))
    o = t(B, L, H, D // H).float()
    return inputs, (o, torch.rand(D, device=device) + 0.5, torch.randn(D, device=device))


def run_layer_math(inputs_fn, read_out_fn, inputs, outs):
    """The recurrence inputs and a read-out of them (with the recurrence's output o standing in), and the gradients
    of a fixed projection of everything with respect to every tensor."""
    leaves = [t.detach().requires_grad_() if t is not None else None for t in inputs + outs]
    *recurrence_args, o, weight, bias = leaves
    r2, w, k2, v2, a, b, bonus, g = inputs_fn(*recurrence_args)
    y = read_out_fn(o, bonus, g, weight, bias, 1e-5, torch.float32)
    results = (r2, w, k2, v2, a, b, bonus, g, y)
    torch.manual_seed(1)
    loss = sum((t.float() * torch.randn(t.shape, device=t.device)).sum() for t in results)
    grads = torch.autograd.grad(loss, [t for t in leaves if t is not None])
    return results, grads


@pytest.mark.parametrize("first", [True, False])
def test_layer_math_compiles_as_one_graph_each_and_matches_uncompiled(first):
    """torch.compile takes recurrence_inputs and read_out whole (fullgraph), here with the ``aot_eager`` backend (the
    traced forward and backward graphs, no code generated: CI's CPU need not have a C++ compiler): every output and
    gradient as the uncompiled functions'."""
    inputs, outs = layer_inputs(first)
    compiled = [lambda *a, c=c: c(*a, fallback=False, compiler="aot_eager")
                for c in (RECURRENCE_INPUTS_COMPILED, READ_OUT_COMPILED)]
    got, got_grads = run_layer_math(*compiled, inputs, outs)
    want, want_grads = run_layer_math(recurrence_inputs, read_out, inputs, outs)
    assert len(got_grads) == (12 if first else 15)
    for g, w in zip(got + got_grads, want + want_grads):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_evaluation_and_cpu_run_the_layer_math_uncompiled():
    layer = RWKV7(32, layer_idx=1, head_dim=16)
    backend.clear()
    layer(torch.randn(2, 8, 32))
    assert backend.last_backend("rwkv7_layer") == backend.NAIVE


@pytest.mark.gpu
@pytest.mark.parametrize("layer_idx", [0, 1])
def test_training_on_gpu_runs_the_compiled_layer_math(layer_idx):
    """Training's call (bf16 autocast, gradients on) on a GPU runs the compiled functions, and the layer's output and
    every parameter's gradient match the uncompiled layer's up to the fused kernels' rounding; evaluation (no
    gradients) runs uncompiled."""
    torch.manual_seed(0)
    layer = RWKV7(128, layer_idx=layer_idx, head_dim=64).cuda()
    torch.nn.init.normal_(layer.o_proj.weight, std=0.05)  # it starts at zero, as in fla
    for lora in (layer.w_lora, layer.a_lora, layer.g_lora, layer.v_lora):
        if lora is not None:
            torch.nn.init.normal_(lora.down.weight, std=0.05)
    x = torch.randn(4, 100, 128, device="cuda")
    v_first = torch.randn(4, 100, 128, device="cuda", dtype=torch.bfloat16)  # layer 0's value under autocast

    def step(compiled: bool):
        layer.zero_grad()
        backend.clear()
        uncompiled = lambda functions, *args: functions.fn(*args)  # noqa: E731
        with torch.autocast("cuda", dtype=torch.bfloat16), \
                patch("zoo.mixers.rwkv7.compiled_in_training", uncompiled) if not compiled else nullcontext():
            y = layer(x, {"v_first": v_first})
        assert backend.last_backend("rwkv7_layer") == ("compiled" if compiled else None)
        assert backend.last_backend("shifted_linear") == "folded"
        torch.manual_seed(1)
        (y.float() * torch.randn_like(y, dtype=torch.float32)).sum().backward()
        return y.float(), {n: p.grad.float().clone() for n, p in layer.named_parameters() if p.grad is not None}

    got, got_grads = step(True)
    want, want_grads = step(False)
    assert got_grads.keys() == want_grads.keys()
    scale = want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * scale)
    for name, w in want_grads.items():
        err = ((got_grads[name].double() - w.double()).norm() / w.double().norm().clamp_min(1e-12)).item()
        assert err < 2e-2, (name, err)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        layer(x, {"v_first": v_first})
    assert backend.last_backend("rwkv7_layer") == backend.NAIVE
