"""RWKV-7's Triton fused recurrence in its three modes (every state stored, every other state stored, chunked states
recomputed) against the step-by-step recurrence: values and all six gradients, strong and weak decays, launch choices, bit-reproducibility;
and on a GPU, ``rwkv7(..., backend="auto")`` in bf16 at the model's head size against the chunked form."""
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from zoo.kernels import backend
from zoo.kernels.rwkv7 import fused_recurrent, rwkv7
from zoo.kernels.rwkv7.chunk import Launch as ChunkLaunch, rwkv7_chunk
from zoo.kernels.rwkv7.chunked import rwkv7_chunked
from zoo.kernels.rwkv7.fused_recurrent import rwkv7_fused
from zoo.kernels.rwkv7.naive import rwkv7_naive, rwkv7_recurrence

MODES = ("all", "half", "chunked")
NAMES = ("o", "r", "w", "k", "v", "a", "b")


def use_mode(monkeypatch, mode, chunk):
    """Make the Triton kernel run in ``mode`` where the launch says "auto": the test shapes fit the default budget,
    so all and half as the preferred mode, chunked with a zero budget (and ``chunk`` steps a chunk)."""
    if mode == "chunked":
        monkeypatch.setattr(fused_recurrent, "STATE_BUDGET_BYTES", 0)
        monkeypatch.setattr(fused_recurrent, "CHUNK", chunk)
    else:
        monkeypatch.setattr(fused_recurrent, "PREFERRED", mode)


def layer_inputs(B, L, H, K, V, w_low=-5.0, w_high=-0.01, device="cpu", dtype=torch.float32, seed=0):
    """Leaves shaped like the RWKV-7 layer's: a = -kk, b = kk * iclr with kk unit-norm and iclr in (0, 1)."""
    g = torch.Generator().manual_seed(seed)
    r, k = (torch.randn(B, L, H, K, generator=g) for _ in range(2))
    v = torch.randn(B, L, H, V, generator=g)
    kk = F.normalize(torch.randn(B, L, H, K, generator=g), dim=-1)
    iclr = torch.rand(B, L, H, K, generator=g)
    w = w_low + (w_high - w_low) * torch.rand(B, L, H, K, generator=g)
    return [t.to(device, dtype).requires_grad_() for t in (r, w, k, v, -kk, kk * iclr)]


def grads(fn, xs, do):
    """[o, gradient of each of r, w, k, v, a, b]."""
    o = fn(*xs)
    return [o, *torch.autograd.grad(o, xs, do.to(o.dtype))]


def assert_matches(got, want, **tol):
    for name, g, w in zip(NAMES, got, want):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g.double(), w.double(), **tol, msg=lambda m: f"{name}: {m}")


def fused_against_naive(shape, w_low, w_high, device="cpu", launch=fused_recurrent.Launch(), seed=0):
    """(Triton's [o, grads] in float32, the recurrence's in float64 on the same values)."""
    xs = layer_inputs(*shape, w_low, w_high, device=device, seed=seed)
    do = torch.randn(*shape[:3], shape[4], generator=torch.Generator().manual_seed(seed + 1)).to(device)
    got = grads(lambda *x: rwkv7_fused(*x, launch=launch), xs, do)
    xs64 = [t.detach().double().requires_grad_() for t in xs]
    return got, grads(rwkv7_recurrence, xs64, do.double())


# (B, L, H, K, V), CHUNK (chunked mode), w range: L = 19 not a multiple of the chunk (and odd: half mode's last state
# is stored after an odd step), L = 8 even; V = 32 two value blocks of the
# default 16 (partial sums over value blocks); K, V not powers of two (masked padding); strong and weak decays
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, chunk, w_low, w_high", [
    ((2, 19, 2, 16, 32), 8, -5.0, -0.01),
    ((1, 19, 1, 16, 32), 4, -20.0, -8.0),
    ((1, 11, 1, 16, 16), 16, -1e-3, -1e-6),
    ((1, 7, 2, 6, 20), 2, -3.0, -0.1),
    ((1, 8, 1, 8, 16), 4, -2.0, -0.05),
], ids=["layer", "strong", "weak", "padded", "even"])
def test_triton_matches_naive(monkeypatch, mode, shape, chunk, w_low, w_high):
    use_mode(monkeypatch, mode, chunk)
    got, want = fused_against_naive(shape, w_low, w_high)
    assert got[0].dtype == torch.float32
    assert_matches(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_bf16_states_change_the_gradients_by_their_rounding_alone(monkeypatch, device, mode):
    """``states_dtype=torch.bfloat16`` keeps the states in bf16 (half their memory): o is the same (the forward walks
    in float32), the gradients as close to float32 states' as bf16 rounding of the states allows."""
    use_mode(monkeypatch, mode, chunk=4)
    shape = (1, 9, 2, 16, 32) if device == "cpu" else (4, 70, 2, 64, 64)
    xs = layer_inputs(*shape, device=device, dtype=torch.bfloat16)
    do = torch.randn(*shape[:3], shape[4], device=device)
    half_bytes = fused_recurrent.Launch(states_dtype=torch.bfloat16)
    if device == "cpu":
        for launch, dtype in ((fused_recurrent.Launch(), torch.float32), (half_bytes, torch.bfloat16)):
            assert rwkv7_fused(*xs, launch=launch).grad_fn.saved_tensors[-1].dtype == dtype
    want = grads(rwkv7_fused, xs, do)
    got = grads(lambda *x: rwkv7_fused(*x, launch=half_bytes), xs, do)
    assert torch.equal(got[0], want[0])
    for name, g, w in zip(NAMES[1:], got[1:], want[1:]):
        torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=2e-2 * w.float().abs().max().item(),
                                   msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("mode", MODES)
def test_triton_is_bit_reproducible(monkeypatch, mode):
    use_mode(monkeypatch, mode, chunk=4)
    xs = layer_inputs(1, 9, 1, 16, 32)
    do = torch.randn(1, 9, 1, 32)
    first, second = (grads(rwkv7_fused, xs, do) for _ in range(2))
    assert all(torch.equal(x, y) for x, y in zip(first, second))


@pytest.mark.parametrize("preferred, kept", [("all", 10), ("half", 6)])
def test_triton_keeps_the_preferred_states_within_the_budget_and_chunks_above_it(monkeypatch, preferred, kept):
    """"auto" keeps S_0 .. S_9 (all) or S_0, S_2, .., S_8, S_9 (half) where they fit, else every 4th; a mode by
    name is kept whatever the budget."""
    B, L, H, K, V = 2, 9, 2, 4, 8
    monkeypatch.setattr(fused_recurrent, "CHUNK", 4)
    monkeypatch.setattr(fused_recurrent, "PREFERRED", preferred)
    xs = layer_inputs(B, L, H, K, V)
    fits = B * H * kept * K * V * 4  # bytes of the float32 states
    for budget, states, mode, n_states in ((fits, "auto", preferred, kept), (fits - 1, "auto", "chunked", 3),
                                           (0, "half", "half", 6), (0, "all", "all", 10)):
        monkeypatch.setattr(fused_recurrent, "STATE_BUDGET_BYTES", budget)
        ctx = rwkv7_fused(*xs, launch=fused_recurrent.Launch(states=states)).grad_fn
        assert ctx.states == mode and ctx.saved_tensors[-1].shape == (B * H, n_states, K, V)


def test_triton_rejects_an_unknown_states_mode():
    with pytest.raises(ValueError, match="launch.states='every'.*auto, all, half, chunked"):
        rwkv7_fused(*layer_inputs(1, 3, 1, 4, 4), launch=fused_recurrent.Launch(states="every"))


@pytest.mark.parametrize("kernel, o_dtype, o_rtol", [
    (rwkv7_fused, torch.float32, 1e-4),
    (partial(rwkv7_chunk, launch=ChunkLaunch(states_dtype=torch.float32)), torch.bfloat16, 2 ** -7)],
    ids=["fused", "chunk"])
def test_triton_takes_strided_low_precision_views(kernel, o_dtype, o_rtol):
    """r, k, v as slices of one bf16 projection (the fused kernel reads them in place, the chunked ones copy them
    contiguous): the output is float32 (the fused kernel) or bf16 (the chunked ones, as fla's), the gradients come
    back in bf16, matching the recurrence on the same values (o within one step of its dtype). L = 18 crosses a
    chunk boundary; the decays lie in the layer's range, which the chunked kernels need (their states kept in
    float32 here: bf16 states' rounding is ``test_rwkv7_chunk.py``'s)."""
    B, L, H, K = 2, 18, 2, 8
    g = torch.Generator().manual_seed(3)
    rkv = torch.randn(B, L, H, 3 * K, generator=g).bfloat16().requires_grad_()
    rest = [t.bfloat16().requires_grad_() for t in layer_inputs(B, L, H, K, K, -0.6, -0.01)[1::3]]  # w and a
    b = (-rest[1].detach().float() * 0.5).bfloat16().requires_grad_()
    do = torch.randn(B, L, H, K, generator=g).bfloat16().float()  # the same values as a bf16 o's gradient

    def run(fn, dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (rkv, *rest, b)]
        r, k, v = leaves[0].split(K, dim=-1)
        o = fn(r, leaves[1], k, v, leaves[2], leaves[3])
        return [o, *torch.autograd.grad(o, leaves, do.to(o.dtype))]

    got, want = run(kernel, torch.bfloat16), run(rwkv7_recurrence, torch.float64)
    assert got[0].dtype == o_dtype and all(t.dtype == torch.bfloat16 for t in got[1:])
    torch.testing.assert_close(got[0].double(), want[0], rtol=o_rtol, atol=1e-4)
    for g_, w in zip(got[1:], want[1:]):  # gradients rounded to bf16
        torch.testing.assert_close(g_.double(), w, rtol=1e-2, atol=1e-2)


LAUNCHES = [fused_recurrent.Launch(block_v=8, num_warps=1, num_stages=1),
            fused_recurrent.Launch(block_v=32, num_warps=2, num_stages=2),
            fused_recurrent.Launch(block_v=64, num_warps=4, num_stages=1)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_launch_choices_change_only_the_speed(monkeypatch, device, mode):
    """Value columns per program, warps and pipelining stages give the default launch's values (partial sums over
    other value blocks: equal up to rounding)."""
    use_mode(monkeypatch, mode, chunk=4 if device == "cpu" else fused_recurrent.CHUNK)
    shape = (1, 9, 1, 16, 32) if device == "cpu" else (4, 100, 2, 64, 64)
    xs = layer_inputs(*shape, device=device)
    do = torch.randn(*shape[:3], shape[4], device=device)
    want = grads(rwkv7_fused, xs, do)
    # the GPU shape sums 100 steps of K = 64 products in another order per launch: on an H200 one element of 51,200
    # differed by 1.05e-5, so the GPU tolerance is 1e-4
    tol = 1e-5 if device == "cpu" else 1e-4
    for launch in LAUNCHES:
        got = grads(lambda *x: rwkv7_fused(*x, launch=launch), xs, do)
        for name, g, w in zip(NAMES, got, want):
            torch.testing.assert_close(g, w, rtol=tol, atol=tol, msg=lambda m: f"{launch} {name}: {m}")


def test_rwkv7_dispatches_triton():
    xs = layer_inputs(2, 6, 2, 8, 8)
    backend.clear()
    got = rwkv7(*xs, backend="triton")
    assert backend.last_backend("rwkv7") == "triton"
    torch.testing.assert_close(got, rwkv7(*xs, backend="naive"), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(3, 130, 2, 64, 64), (2, 77, 3, 32, 64)])
def test_triton_matches_naive_on_gpu(monkeypatch, mode, shape):
    """float32 on the GPU at a moderate shape, through the entry, against the step-by-step recurrence."""
    use_mode(monkeypatch, mode, chunk=fused_recurrent.CHUNK)
    xs = layer_inputs(*shape, w_low=-6.0, w_high=-1e-4, device="cuda")
    do = torch.randn(*shape[:3], shape[4], device="cuda")
    backend.clear()
    got = grads(lambda *x: rwkv7(*x, backend="triton"), xs, do)
    assert backend.last_backend("rwkv7") == "triton"
    assert_matches(got, grads(rwkv7_naive, xs, do), rtol=2e-3, atol=2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("w_min, ours", [(-0.6065, "triton_chunk"), (None, "triton")])
def test_auto_on_gpu_runs_fla_or_ours_in_bf16(w_min, ours):
    """The model's call (w_min given) and a call with unbounded decays: bf16 inputs at K = V = 64. Where fla's chunk
    kernels are unreliable (Hopper, Triton < 3.7.1) "auto" must run our chunked kernels where w_min fits them,
    else our fused recurrence; elsewhere fla where it imports. Each matches the chunked PyTorch form (float32 on
    the same bf16 values) within bf16 rounding, values and gradients."""
    shape = (2, 100, 2, 64, 64)
    xs = layer_inputs(*shape, w_low=-0.6065, w_high=-1e-3, device="cuda", dtype=torch.bfloat16)
    do = torch.randn(*shape[:3], shape[4], device="cuda")
    backend.clear()
    got = grads(lambda *x: rwkv7(*x, w_min=w_min, backend="auto"), xs, do)
    ran = backend.last_backend("rwkv7")
    if backend.fla_chunks_unreliable(torch.cuda.current_device()):
        assert ran == ours
    else:
        assert ran in ("fla", ours)
    want = grads(rwkv7_chunked, xs, do)
    for name, g, w in zip(NAMES, got, want):
        scale = w.float().abs().max().item()
        err = (g.float() - w.float()).abs().max().item()
        assert err <= 2e-2 * scale + 1e-2, f"{name}: max error {err} against max |value| {scale} ({ran})"
