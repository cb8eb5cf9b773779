"""WKV-4: the recurrence against the explicit sum, and the Triton kernel against the recurrence."""
import pytest
import torch

from zoo.kernels.wkv4.fused_recurrent import wkv4
from zoo.kernels.wkv4.naive import wkv4_naive


def wkv4_explicit(w, u, k, v):
    """Straight from the definition, no stabilization (float64, small k)."""
    B, L, C = k.shape
    y = torch.empty_like(k)
    for t in range(L):
        i = torch.arange(t, dtype=k.dtype)
        weight = torch.exp(-(t - 1 - i)[None, :, None] * w + k[:, :t])  # (B, t, C)
        bonus = torch.exp(u + k[:, t])
        y[:, t] = ((weight * v[:, :t]).sum(1) + bonus * v[:, t]) / (weight.sum(1) + bonus)
    return y


def inputs(B, L, C, dtype, device="cpu", k_scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.rand(C, generator=g) * 2 + 0.05).to(device, dtype)
    u = torch.randn(C, generator=g).to(device, dtype)
    k = (torch.randn(B, L, C, generator=g) * k_scale).to(device, dtype)
    v = torch.randn(B, L, C, generator=g).to(device, dtype)
    return [t.requires_grad_() for t in (w, u, k, v)]


def grads(fn, args, gy):
    y = fn(*args)
    return [y, *torch.autograd.grad(y, args, gy.to(y.dtype))]


def test_naive_matches_explicit_sum():
    args = inputs(2, 12, 5, torch.float64)
    torch.testing.assert_close(wkv4_naive(*args), wkv4_explicit(*args))


def test_naive_is_stable_for_large_keys():
    w, u, k, v = inputs(1, 16, 4, torch.float32, k_scale=60.0)  # e^{k} overflows float32 without the max shift
    assert torch.isfinite(wkv4_naive(w, u, k, v)).all()


@pytest.mark.parametrize("shape", [(2, 9, 5), (1, 17, 70)])
def test_triton_matches_naive(shape):
    args = inputs(*shape, torch.float64, k_scale=3.0)
    gy = torch.randn(shape, dtype=torch.float64)
    for got, want in zip(grads(wkv4, args, gy), grads(wkv4_naive, args, gy)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 64, 128), (3, 257, 96), (4, 256, 256)])
def test_triton_matches_naive_on_gpu(shape):
    args = inputs(*shape, torch.float32, device="cuda", k_scale=3.0)
    gy = torch.randn(shape, device="cuda")
    for got, want in zip(grads(wkv4, args, gy), grads(wkv4_naive, args, gy)):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
