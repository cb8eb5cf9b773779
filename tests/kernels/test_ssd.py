"""Mamba-2's SSD: the quadratic reference against the state recurrence, the chunked form against the reference."""
import torch

from zoo.kernels.ssd.chunked import ssd_chunked
from zoo.kernels.ssd.naive import ssd_naive


def ssd_inputs(Bt: int, L: int, H: int = 3, P: int = 4, N: int = 5):
    """x [B, L, H, P], dt [B, L, H] > 0, A [H] < 0, B and C [B, L, N], float64."""
    torch.manual_seed(0)
    x = torch.randn(Bt, L, H, P, dtype=torch.float64)
    dt = torch.rand(Bt, L, H, dtype=torch.float64) + 0.05
    A = -torch.rand(H, dtype=torch.float64) * 2
    B, C = torch.randn(Bt, L, N, dtype=torch.float64), torch.randn(Bt, L, N, dtype=torch.float64)
    return x, dt, A, B, C


def test_ssd_matches_recurrence():
    Bt, L, H, P, N = 2, 10, 3, 4, 5
    x, dt, A, B, C = ssd_inputs(Bt, L, H, P, N)
    S = torch.zeros(Bt, H, N, P, dtype=torch.float64)
    want = []
    for t in range(L):
        S = torch.exp(dt[:, t] * A)[..., None, None] * S + dt[:, t, :, None, None] * B[:, t, None, :, None] * x[:, t, :, None, :]
        want.append(torch.einsum("bhnp,bn->bhp", S, C[:, t]))
    torch.testing.assert_close(ssd_naive(x, dt, A, B, C).double(), torch.stack(want, dim=1), rtol=1e-5, atol=1e-5)


def test_chunked_matches_quadratic():
    x, dt, A, B, C = ssd_inputs(2, 21)
    torch.testing.assert_close(ssd_chunked(x, dt, A, B, C, chunk=8), ssd_naive(x, dt, A, B, C), rtol=1e-5, atol=1e-5)


def test_chunked_is_float32_under_bf16_autocast():
    """Its einsums must not drop to bf16 under training's autocast: same result with and without it."""
    x, dt, A, B, C = (t.float() for t in ssd_inputs(2, 21))
    want = ssd_chunked(x, dt, A, B, C, chunk=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = ssd_chunked(x, dt, A, B, C, chunk=8)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
