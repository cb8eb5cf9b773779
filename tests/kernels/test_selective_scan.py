"""Selective scan: the recurrence against the explicit sum, and the Triton kernel against the recurrence."""
import pytest
import torch

from zoo.kernels.selective_scan.fused_recurrent import selective_scan
from zoo.kernels.selective_scan.naive import selective_scan_naive


def scan_explicit(u, dt, A, B, C):
    """y_t[d] = sum_{s<=t} sum_n C_t[n] exp(A[d,n] sum_{s<r<=t} dt_r[d]) dt_s[d] B_s[n] u_s[d]."""
    Bt, L, D = u.shape
    cum = torch.cumsum(dt, dim=1)  # (Bt, L, D)
    y = torch.zeros_like(u)
    for t in range(L):
        for s in range(t + 1):
            decay = torch.exp(A * (cum[:, t] - cum[:, s])[..., None])  # (Bt, D, N)
            y[:, t] += torch.einsum("bdn,bn,bn->bd", decay, C[:, t], B[:, s]) * dt[:, s] * u[:, s]
    return y


def inputs(Bt, L, D, N, dtype, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(Bt, L, D, generator=g)
    dt = torch.rand(Bt, L, D, generator=g) * 0.2 + 1e-3
    A = -torch.arange(1, N + 1, dtype=torch.float32).repeat(D, 1) * torch.rand(D, 1, generator=g)
    B, C = torch.randn(Bt, L, N, generator=g), torch.randn(Bt, L, N, generator=g)
    return [t.to(device, dtype).requires_grad_() for t in (u, dt, A, B, C)]


def grads(fn, args, gy):
    y = fn(*args)
    return [y, *torch.autograd.grad(y, args, gy.to(y.dtype))]


def test_naive_matches_explicit_sum():
    args = inputs(2, 7, 3, 4, torch.float64)
    torch.testing.assert_close(selective_scan_naive(*args), scan_explicit(*args))


@pytest.mark.parametrize("shape", [(2, 7, 40, 4), (1, 12, 8, 16)])
def test_triton_matches_naive(shape):
    args = inputs(*shape, torch.float64)
    gy = torch.randn(shape[:3], dtype=torch.float64)
    for got, want in zip(grads(selective_scan, args, gy), grads(selective_scan_naive, args, gy)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 64, 256, 16), (3, 130, 100, 16), (2, 256, 64, 8)])
def test_triton_matches_naive_on_gpu(shape):
    args = inputs(*shape, torch.float32, device="cuda")
    gy = torch.randn(shape[:3], device="cuda")
    for got, want in zip(grads(selective_scan, args, gy), grads(selective_scan_naive, args, gy)):
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
