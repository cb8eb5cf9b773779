"""Hyena's long convolution: the direct reference, the FFT path and the Toeplitz product against the explicit
causal sum; the Toeplitz product's hand-written backward against autograd through the reference."""
import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.long_conv import auto_backend, long_conv
from zoo.kernels.long_conv.fft import fft_causal_conv
from zoo.kernels.long_conv.naive import long_conv_naive
from zoo.kernels.long_conv.toeplitz import diagonal_sums, toeplitz_causal_conv, toeplitz_matrices


def inputs(B, L, D, dtype=torch.float32, device="cpu", h_dtype=None, grad=False):
    u = torch.randn(B, L, D, device=device).to(dtype)
    h = (torch.randn(L, D, device=device) * 0.1).to(h_dtype or dtype)
    bias = torch.randn(D, device=device).to(h_dtype or dtype)
    return [x.requires_grad_(grad) for x in (u, h, bias)]


def grads(conv, args, gy):
    return torch.autograd.grad(conv(*args), args, gy)


def rel_err(got, want):
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


@pytest.mark.parametrize("conv", [fft_causal_conv, long_conv_naive, toeplitz_causal_conv])
def test_matches_explicit_sum(conv):
    torch.manual_seed(0)
    B, L, D = 2, 11, 3
    u, h, bias = torch.randn(B, L, D, dtype=torch.float64), torch.randn(L, D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    want = torch.stack([sum(h[t - s] * u[:, s] for s in range(t + 1)) + bias * u[:, t] for t in range(L)], dim=1)
    torch.testing.assert_close(conv(u, h, bias).double(), want, rtol=1e-5, atol=1e-5)


def test_fft_matches_reference_in_float32():
    torch.manual_seed(0)
    u, h, bias = torch.randn(2, 64, 5), torch.randn(64, 5) * 0.1, torch.randn(5)
    torch.testing.assert_close(fft_causal_conv(u, h, bias), long_conv_naive(u, h, bias), rtol=1e-4, atol=1e-4)


def test_toeplitz_matches_reference_in_float32():
    torch.manual_seed(0)
    u, h, bias = inputs(3, 64, 5)
    got = toeplitz_causal_conv(u, h, bias)
    assert got.dtype == torch.float32 and got.shape == u.shape and got.is_contiguous()
    torch.testing.assert_close(got, long_conv_naive(u, h, bias), rtol=1e-5, atol=1e-5)


def test_toeplitz_matrices_are_lower_triangular_toeplitz():
    taps = torch.arange(1.0, 13.0).reshape(2, 6)
    T = toeplitz_matrices(taps)
    for d in range(2):
        for t in range(6):
            for s in range(6):
                assert T[d, t, s] == (taps[d, t - s] if t >= s else 0)


def test_diagonal_sums_sum_each_lower_diagonal_and_ignore_the_upper_triangle():
    """The strided view of the padded dT: [d, k] sums dT[d, t, t - k] over t = k..L-1, and nothing above the
    diagonal (filled with garbage here) gets in."""
    torch.manual_seed(0)
    D, L = 3, 7
    dT = torch.randn(D, L, L, dtype=torch.float64)
    padded = torch.zeros(D, 2 * L, L, dtype=torch.float64)
    padded[:, :L] = dT
    want = torch.stack([torch.stack([dT[d].diagonal(-k).sum() for k in range(L)]) for d in range(D)])
    torch.testing.assert_close(diagonal_sums(padded, torch.float64), want, rtol=0, atol=1e-12)
    padded[:, :L] += torch.triu(torch.full((L, L), 1e6, dtype=torch.float64), diagonal=1)
    torch.testing.assert_close(diagonal_sums(padded, torch.float64), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_toeplitz_gradients_match_autograd_through_the_reference(dtype, tol):
    torch.manual_seed(0)
    args = inputs(3, 33, 4, dtype, grad=True)
    gy = torch.randn(3, 33, 4, dtype=dtype)
    got, want = grads(toeplitz_causal_conv, args, gy), grads(long_conv_naive, args, gy)
    for g, w, x in zip(got, want, args):
        assert g.dtype == x.dtype and g.shape == x.shape and g.is_contiguous()
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


def test_toeplitz_gradcheck_in_float64():
    torch.manual_seed(0)
    assert torch.autograd.gradcheck(toeplitz_causal_conv, inputs(2, 6, 3, torch.float64, grad=True))


def test_toeplitz_gradient_of_one_input_only():
    torch.manual_seed(0)
    u, h, bias = inputs(2, 16, 3)
    h.requires_grad_()
    gy = torch.randn(2, 16, 3)
    (dh,) = torch.autograd.grad(toeplitz_causal_conv(u, h, bias), h, gy)
    torch.testing.assert_close(dh, torch.autograd.grad(long_conv_naive(u, h, bias), h, gy)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("h_dtype", [torch.bfloat16, torch.float32])
def test_toeplitz_in_bf16_is_close_to_float32(h_dtype):
    """bf16 u (and bf16 or, as under autocast, float32 h and bias): the product runs in bf16 with the taps
    rounded to bf16; output and gradients within bf16 rounding of the float32 reference on the same values."""
    torch.manual_seed(0)
    args = inputs(4, 64, 8, torch.bfloat16, h_dtype=h_dtype, grad=True)
    ref = [x.detach().float().requires_grad_() for x in args]
    gy = torch.randn(4, 64, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # changes nothing inside: the Function decides
        y = toeplitz_causal_conv(*args)
    assert y.dtype == torch.bfloat16
    want = long_conv_naive(*ref)
    assert rel_err(y, want) < 1e-2
    got = torch.autograd.grad(y, args, gy.bfloat16())
    for g, w, x in zip(got, torch.autograd.grad(want, ref, gy), args):
        assert g.dtype == x.dtype
        assert rel_err(g, w) < 2e-2


def test_toeplitz_backward_is_deterministic():
    torch.manual_seed(0)
    args = inputs(4, 48, 6, grad=True)
    gy = torch.randn(4, 48, 6)
    y = toeplitz_causal_conv(*args)
    first = torch.autograd.grad(y, args, gy, retain_graph=True)
    second = torch.autograd.grad(y, args, gy)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_named_toeplitz_is_recorded_and_auto_keeps_the_fft():
    torch.manual_seed(0)
    u, h, bias = inputs(2, 16, 3)
    backend.clear()
    y = long_conv(u, h, bias, backend="toeplitz")
    assert backend.last_backend("long_conv") == "toeplitz"
    torch.testing.assert_close(y, long_conv_naive(u, h, bias), rtol=1e-5, atol=1e-5)
    long_conv(u, h, bias)
    assert backend.last_backend("long_conv") == "fft" == auto_backend(u)


def test_toeplitz_refuses_mismatched_shapes():
    u, h, bias = inputs(2, 16, 3)
    with pytest.raises(ValueError, match="expected u"):
        toeplitz_causal_conv(u, h[:8], bias)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_toeplitz_matches_fft_on_gpu(dtype):
    """Hyena's shapes under autocast: u in ``dtype``, h and bias float32; output and gradients vs the FFT path."""
    torch.manual_seed(0)
    B, L, D = 64, 256, 128
    args = inputs(B, L, D, dtype, device="cuda", h_dtype=torch.float32, grad=True)
    gy = torch.randn(B, L, D, device="cuda", dtype=dtype)
    backend.clear()
    y = long_conv(*args, backend="toeplitz")
    assert backend.last_backend("long_conv") == "toeplitz" and y.dtype == dtype
    got = torch.autograd.grad(y, args, gy)
    want_y = long_conv(*args, backend="fft")
    want = torch.autograd.grad(want_y, args, gy)
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-5
    assert rel_err(y, want_y) < tol
    for g, w, x in zip(got, want, args):
        assert g.dtype == x.dtype and rel_err(g, w) < 2 * tol
    again = torch.autograd.grad(long_conv(*args, backend="toeplitz"), args, gy)
    assert all(torch.equal(a, b) for a, b in zip(got, again))
