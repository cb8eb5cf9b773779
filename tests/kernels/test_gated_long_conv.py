"""Hyena's gated long conv, the Triton path (interpreted on CPU) against the unfused composition: output and the
gradients of xbc, filter and skip, strided inputs, dtypes, backend choice, Hyena's layer on either path; on GPU
also bf16 and capture by a CUDA graph."""
import functools

import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.long_conv import gated_long_conv
from zoo.kernels.long_conv import gated
from zoo.kernels.long_conv.fft import fft_causal_conv
from zoo.mixers.hyena import Hyena
from graph_capture import assert_replays_like_eager

B, L, D = 3, 11, 5
# no dimension a multiple of its tile: partial tiles of times, channels, sequences and (channel, frequency) pairs
SMALL_TILES = gated.Tiles(t=4, d=4, b=2, n=16)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def inputs(xbc=None, h_dtype=torch.float32):
    """(xbc [B, L, 3D], h [L, D], bias [D]), leaves that need gradients; taps scaled so that y stays O(1)."""
    xbc = torch.randn(B, L, 3 * D) if xbc is None else xbc
    h = (torch.randn(L, D) * L ** -0.5).to(h_dtype)
    return xbc.requires_grad_(), h.requires_grad_(), torch.randn(D).requires_grad_()


def output_and_grads(run, xbc, h, bias, dout):
    """(out, dxbc, dh, dbias) of ``run``."""
    out = run(xbc, h, bias)
    return (out, *torch.autograd.grad(out, (xbc, h, bias), dout))


def triton_small_tiles(xbc, h, bias):
    return gated.gated_long_conv(xbc, h, bias, tiles=SMALL_TILES)


naive = functools.partial(gated_long_conv, backend="naive")


def assert_close_relative(got, want, tol):
    """Elementwise within ``tol`` of the largest value of ``want`` (the FFTs spread rounding over a whole row)."""
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * want.abs().max().item())


def test_naive_is_the_unfused_composition():
    xbc, h, bias = inputs()
    x1, x2, v = xbc.chunk(3, dim=-1)
    backend.clear()
    out = gated_long_conv(xbc, h, bias, backend="naive")
    assert backend.last_backend("gated_long_conv") == "naive" and backend.last_backend("long_conv") == "fft"
    torch.testing.assert_close(out, x2 * fft_causal_conv(x1 * v, h, bias), rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["contiguous", "chunk of a wider projection", "channel-first storage"])
def test_triton_matches_naive(layout):
    """xbc read where it lies: contiguous, a slice of a wider [B, L, 3D + 2] or a transposed [B, 3D, L]; the output
    gradient a transposed view too. The gradient of xbc comes back contiguous."""
    xbc = {"contiguous": lambda: torch.randn(B, L, 3 * D),
           "chunk of a wider projection": lambda: torch.randn(B, L, 3 * D + 2)[..., 1:1 + 3 * D],
           "channel-first storage": lambda: torch.randn(B, 3 * D, L).transpose(1, 2)}[layout]()
    args = inputs(xbc)
    dout = torch.randn(B, D, L).transpose(1, 2)
    got = output_and_grads(triton_small_tiles, *args, dout)
    want = output_and_grads(naive, *args, dout)
    assert got[0].is_contiguous() and got[1].is_contiguous()
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert_close_relative(g, w, 1e-5)


@pytest.mark.parametrize("length", [1, 2, 16])
def test_triton_matches_naive_at_lengths(length):
    """The spectra are packed into L bins (k and its mirror L - k, the last bin L owned by k = 0): L = 1 has one bin
    and its mirror, L = 16 fills the small tiles of pairs exactly."""
    xbc = torch.randn(B, length, 3 * D).requires_grad_()
    h = (torch.randn(length, D) * length ** -0.5).requires_grad_()
    bias = torch.randn(D).requires_grad_()
    dout = torch.randn(B, length, D)
    got = output_and_grads(triton_small_tiles, xbc, h, bias, dout)
    want = output_and_grads(naive, xbc, h, bias, dout)
    for g, w in zip(got, want):
        assert_close_relative(g, w, 1e-5)


def test_bf16_activations_give_bf16_output_and_gradients_in_their_inputs_dtypes():
    """As under autocast: bf16 xbc, a bf16 or float32 filter, a float32 skip; the reference runs in float32 on the
    same values."""
    xbc, h, bias = inputs(torch.randn(B, L, 3 * D).bfloat16(), h_dtype=torch.bfloat16)
    dout = torch.randn(B, L, D).bfloat16()
    got = output_and_grads(triton_small_tiles, xbc, h, bias, dout)
    assert [t.dtype for t in got] == [torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float32]
    want = output_and_grads(naive, xbc.detach().float().requires_grad_(), h.detach().float().requires_grad_(), bias,
                            dout.float())
    for g, w in zip(got, want):  # one bf16 rounding of a float32 result
        assert_close_relative(g.float(), w, 1e-2)


def test_entry_runs_triton_when_named_and_auto_is_the_composition_on_cpu():
    args = inputs()
    dout = torch.randn(B, L, D)
    backend.clear()
    got = output_and_grads(functools.partial(gated_long_conv, backend="triton"), *args, dout)
    assert backend.last_backend("gated_long_conv") == "triton"
    for g, w in zip(got, output_and_grads(naive, *args, dout)):
        assert_close_relative(g, w, 1e-5)
    torch.testing.assert_close(gated_long_conv(*args), naive(*args), rtol=0, atol=0)
    assert backend.last_backend("gated_long_conv") == "naive"


def test_bad_arguments_raise():
    xbc, h, bias = inputs()
    with pytest.raises(ValueError, match="backend='fft' is not valid: expected one of auto, triton, naive"):
        gated_long_conv(xbc, h, bias, backend="fft")
    with pytest.raises(ValueError, match=r"h \(10, 5\) .* do not fit"):
        gated.gated_long_conv(xbc, h[:-1], bias)
    with pytest.raises(ValueError, match=r"xbc \(3, 11, 14\)"):
        gated.gated_long_conv(xbc[..., :-1], h, bias)


def test_hyena_layer_on_the_triton_path_matches_the_composition(monkeypatch):
    """The layer hands its projection to the op whole, in Zoology's stream order (x1, x2, v)."""
    layer = Hyena(8, max_seq_len=16)
    x = torch.randn(2, 10, 8)
    want = layer(x)
    want_grads = torch.autograd.grad(want.square().sum(), list(layer.parameters()))
    monkeypatch.setattr("zoo.mixers.hyena.gated_long_conv", triton_small_tiles)
    got = layer(x)
    got_grads = torch.autograd.grad(got.square().sum(), list(layer.parameters()))
    for g, w in zip((got, *got_grads), (want, *want_grads)):
        assert_close_relative(g, w, 1e-5)


GPU_SHAPE = (64, 256, 128)  # batch, length, channels: a Hyena layer of the MQAR grid


def gpu_inputs(dtype):
    """(xbc, a strided chunk of a wider projection as training's is not, h, bias, dout) on the GPU."""
    Bg, Lg, Dg = GPU_SHAPE
    xbc = torch.randn(Bg, Lg, 4 * Dg, device="cuda").to(dtype)[..., Dg:].requires_grad_()
    h = (torch.randn(Lg, Dg, device="cuda") * Lg ** -0.5).requires_grad_()
    bias = torch.randn(Dg, device="cuda", requires_grad=True)
    return xbc, h, bias, torch.randn(Bg, Lg, Dg, device="cuda").to(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_matches_reference(dtype):
    xbc, h, bias, dout = gpu_inputs(dtype)
    backend.clear()
    got = output_and_grads(gated_long_conv, xbc, h, bias, dout)
    assert backend.last_backend("gated_long_conv") == "triton"
    xbc32 = xbc.detach().float().requires_grad_()  # the reference in float32 on the same values
    want = output_and_grads(naive, xbc32, h, bias, dout.float())
    for g, w in zip(got[:2], want[:2]):
        assert g.dtype == dtype
        assert_close_relative(g.float(), w, 1e-5 if dtype == torch.float32 else 1e-2)
    for g, w in zip(got[2:], want[2:]):  # float32 sums over B * L = 16384 products
        assert g.dtype == torch.float32
        assert_close_relative(g, w, 1e-4)
    again = output_and_grads(gated_long_conv, xbc, h, bias, dout)
    assert all(torch.equal(a, b) for a, b in zip(got, again))


@pytest.mark.gpu
def test_gpu_forward_and_backward_are_captured_by_a_cuda_graph():
    """No host sync: forward and backward replay from a graph, with the same bits as eagerly."""
    xbc, h, bias, dout = gpu_inputs(torch.bfloat16)

    def step():  # out detached: a kept autograd graph would tie the leaves' AccumulateGrad to the eager stream
        out, *grads = output_and_grads(gated_long_conv, xbc, h, bias, dout)
        return out.detach(), *grads

    assert_replays_like_eager(step, xbc)
