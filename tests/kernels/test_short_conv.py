"""The Triton short convolution against the F.conv1d reference: outputs and all gradients, strided inputs, run-to-run
bit equality of the filter gradient, backend choice, ShortConv's parameters."""
import functools

import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.short_conv import short_conv
from zoo.kernels.short_conv import walk
from zoo.kernels.short_conv.naive import short_conv_naive
from zoo.mixers.short_conv import ShortConv
from graph_capture import assert_replays_like_eager

B, T, C = 2, 11, 13
SMALL = walk.Launch(walk.Walk(times=4, channels=8, num_warps=1), walk.Walk(times=4, channels=8, num_warps=1))
# T and C are no multiples: partial spans and channel blocks, filters reaching across span borders


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def inputs(K, with_bias, x=None):
    """(x [B, T, C], weight [C, K], bias [C] or None), leaves that need gradients."""
    x = torch.randn(B, T, C) if x is None else x
    bias = torch.randn(C).requires_grad_() if with_bias else None
    return x.requires_grad_(), torch.randn(C, K).requires_grad_(), bias


def output_and_grads(run, x, weight, bias, activation, dy):
    """(y, dx, dweight[, dbias]) of ``run``."""
    leaves = [t for t in (x, weight, bias) if t is not None]
    y = run(x, weight, bias, activation)
    return (y, *torch.autograd.grad(y, leaves, dy))


def triton_small_launch(x, weight, bias, activation):
    return walk.short_conv(x, weight, bias, activation, SMALL)


def assert_matches_reference(x, weight, bias, activation, dy=None, rtol=1e-5, atol=1e-5, launch=SMALL):
    dy = torch.randn(x.shape) if dy is None else dy
    got = output_and_grads(functools.partial(walk.short_conv, launch=launch), x, weight, bias, activation, dy)
    want = output_and_grads(short_conv_naive, x, weight, bias, activation, dy)
    assert got[0].is_contiguous() and got[0].dtype == x.dtype
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("K, with_bias, activation", [(1, True, "silu"), (1, False, None), (2, True, None),
                                                      (3, False, "silu"), (4, True, "silu"), (4, False, None),
                                                      (5, True, "silu")])
@pytest.mark.parametrize("times", [2, 4, 8])
def test_matches_reference(K, with_bias, activation, times):
    """T = 11 is no multiple of any span, and with spans of 2 or 4 times the K - 1 rows a span reads before its first
    time (x, forward and backward) and after its last (g recomputed from dy and x, backward) lie in one or more
    other spans; K = 1 reads none. The forward's and backward's spans differ."""
    forward, backward = walk.Walk(times, 8, 1), walk.Walk(max(2, times // 2), 8, 1)
    assert_matches_reference(*inputs(K, with_bias), activation, launch=walk.Launch(forward, backward))


@pytest.mark.parametrize("length", [1, 3])
def test_sequence_shorter_than_the_filter(length):
    """One span, most of it past T, and filters reaching before t = 0 from every time."""
    assert_matches_reference(*inputs(4, True, torch.randn(B, length, C)), "silu")


@pytest.mark.parametrize("layout", ["chunk of a wider projection", "channel-first storage"])
def test_strided_input_and_output_gradient(layout):
    """x read where it lies: one chunk of [B, T, 3C] (Hyena's, time stride 3C) or a transposed [B, C, T]
    (channel stride T); the output gradient a non-contiguous view too."""
    if layout == "chunk of a wider projection":
        x = torch.randn(B, T, 3 * C)[..., C:2 * C]
    else:
        x = torch.randn(B, C, T).transpose(1, 2)
    dy = torch.randn(B, C, T).transpose(1, 2)
    assert_matches_reference(*inputs(3, True, x), "silu", dy)


def test_bf16_input_gives_bf16_output_and_float32_filter_gradients():
    """As under autocast: bf16 activations, float32 parameters; the reference runs in float32 on the same values."""
    x, weight, bias = inputs(4, True, torch.randn(B, T, C).bfloat16())
    dy = torch.randn(B, T, C).bfloat16()
    got = output_and_grads(triton_small_launch, x, weight, bias, "silu", dy)
    assert [t.dtype for t in got] == [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]
    x32 = x.detach().float().requires_grad_()
    want = output_and_grads(short_conv_naive, x32, weight, bias, "silu", dy.float())
    for g, w in zip(got[:2], want[:2]):  # one bf16 rounding of a float32 result
        torch.testing.assert_close(g.float(), w, rtol=1e-2, atol=1e-2)
    for g, w in zip(got[2:], want[2:]):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", [None, "silu"])
def test_entry_runs_triton_when_named_and_filter_gradient_repeats_bitwise(activation):
    x, weight, bias = inputs(4, True)
    dy = torch.randn(B, T, C)

    def grads():
        backend.clear()
        got = output_and_grads(functools.partial(short_conv, backend="triton"), x, weight, bias, activation, dy)
        assert backend.last_backend("short_conv") == "triton"
        return got

    first = grads()
    want = output_and_grads(short_conv_naive, x, weight, bias, activation, dy)
    for g, w in zip(first, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(first[2:], grads()[2:]))


def test_auto_is_the_reference_on_cpu_and_bad_arguments_raise():
    x, weight, bias = inputs(3, True)
    torch.testing.assert_close(short_conv(x, weight, bias), short_conv_naive(x, weight, bias), rtol=0, atol=0)
    assert backend.last_backend("short_conv") == "naive"
    with pytest.raises(ValueError, match="backend='cudnn'.*auto, triton, naive"):
        short_conv(x, weight, bias, backend="cudnn")
    with pytest.raises(ValueError, match="activation='gelu'"):
        short_conv(x, weight, bias, activation="gelu")
    with pytest.raises(ValueError, match="do not fit 13 channels"):
        walk.short_conv(x, weight[:-1], bias)


@pytest.mark.parametrize("activation", [None, "silu"])
def test_short_conv_module_keeps_conv1d_parameters_and_math(activation):
    layer = ShortConv(C, 4, activation=activation)
    assert {k: tuple(v.shape) for k, v in layer.state_dict().items()} == {"conv.weight": (C, 1, 4), "conv.bias": (C,)}
    x = torch.randn(B, T, C)
    want = layer.conv(x.transpose(1, 2))[..., :T].transpose(1, 2)  # the nn.Conv1d it replaces
    want = torch.nn.functional.silu(want) if activation else want
    torch.testing.assert_close(layer(x), want, rtol=0, atol=0)


GPU_SHAPE = (64, 256, 384)  # batch, length, channels: a Hyena / Mamba layer in the MQAR grid


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation", [None, "silu"])
def test_gpu_matches_reference(dtype, activation):
    Bg, Tg, Cg = GPU_SHAPE
    x = torch.randn(Bg, Tg, 3 * Cg, device="cuda").to(dtype)[..., Cg:2 * Cg].requires_grad_()  # a strided chunk
    weight = torch.randn(Cg, 4, device="cuda", requires_grad=True)
    bias = torch.randn(Cg, device="cuda", requires_grad=True)
    dy = torch.randn(Bg, Tg, Cg, device="cuda").to(dtype)
    backend.clear()
    got = output_and_grads(short_conv, x, weight, bias, activation, dy)
    assert backend.last_backend("short_conv") == "triton"
    x32 = x.detach().float().requires_grad_()  # the reference in float32 on the same values, without TF32
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        want = output_and_grads(short_conv_naive, x32, weight, bias, activation, dy.float())
    close = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for g, w in zip(got[:2], want[:2]):
        assert g.dtype == dtype
        torch.testing.assert_close(g.float(), w, **close)
    for g, w in zip(got[2:], want[2:]):  # sums over B * T = 16384 terms
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-3)
    again = output_and_grads(short_conv, x, weight, bias, activation, dy)
    assert all(torch.equal(a, b) for a, b in zip(got[2:], again[2:]))


@pytest.mark.gpu
def test_gpu_forward_and_backward_are_captured_by_a_cuda_graph():
    """No host sync: forward and backward replay from a graph, with the same bits as eagerly."""
    Bg, Tg, Cg = GPU_SHAPE
    x = torch.randn(Bg, Tg, Cg, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(Cg, 4, device="cuda", requires_grad=True)
    bias = torch.randn(Cg, device="cuda", requires_grad=True)
    dy = torch.randn(Bg, Tg, Cg, device="cuda", dtype=torch.bfloat16)

    def step():  # y detached: a kept autograd graph would tie the leaves' AccumulateGrad to the eager stream
        y, *grads = output_and_grads(short_conv, x, weight, bias, "silu", dy)
        return y.detach(), *grads

    assert_replays_like_eager(step, x)
