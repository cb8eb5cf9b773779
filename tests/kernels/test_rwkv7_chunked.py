"""RWKV-7's chunked recurrence against explicit transition matrices (float64: outputs and every gradient),
float32 against that reference at a training length, and its dispatch through ``rwkv7``."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels import backend
from zoo.kernels.rwkv7 import rwkv7
from zoo.kernels.rwkv7.chunked import rwkv7_chunked
from zoo.kernels.rwkv7.naive import rwkv7_naive

from rwkv7_reference import transitions


def layer_inputs(B, L, H, K, V, w_low=-5.0, w_high=-0.01, dtype=torch.float64, seed=0):
    """Shaped like the RWKV-7 layer's: a = -kk, b = kk * iclr with kk unit-norm and iclr in (0, 1)."""
    g = torch.Generator().manual_seed(seed)
    r, k = (torch.randn(B, L, H, K, generator=g, dtype=dtype) for _ in range(2))
    v = torch.randn(B, L, H, V, generator=g, dtype=dtype)
    kk = F.normalize(torch.randn(B, L, H, K, generator=g, dtype=dtype), dim=-1)
    iclr = torch.rand(B, L, H, K, generator=g, dtype=dtype)
    w = w_low + (w_high - w_low) * torch.rand(B, L, H, K, generator=g, dtype=dtype)
    return r, w, k, v, -kk, kk * iclr


@pytest.mark.parametrize("L, chunk", [(32, 8), (37, 8), (37, 16), (5, 16), (16, 16)])  # 37: padded; 5: one short chunk
@pytest.mark.parametrize("w_low, w_high", [(-5.0, -0.01), (-20.0, -8.0)], ids=["layer", "strong"])
def test_matches_transition_matrices_with_gradients(L, chunk, w_low, w_high):
    """Strong decays (|w| up to 20, summed over a chunk far past float's exp range) prove nothing overflows."""
    xs = [t.requires_grad_() for t in layer_inputs(2, L, 3, 6, 5, w_low, w_high)]
    got = rwkv7_chunked(*xs, chunk=chunk)
    want = transitions(*xs)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    grad = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for g_got, g_want in zip(torch.autograd.grad(got, xs, grad), torch.autograd.grad(want, xs, grad)):
        assert torch.isfinite(g_got).all()
        torch.testing.assert_close(g_got, g_want, rtol=1e-9, atol=1e-9)


def test_float32_at_training_length():
    """float32 at L = 256 (16 chunks), zoo's decay range (w in (-0.61, 0)), |o| up to about 40 and gradients
    up to about 90: measured worst absolute errors 7e-6 (outputs) and 2e-5 (gradients), as the step-by-step
    recurrence in float32 (7e-6 and 1e-5)."""
    xs64 = layer_inputs(2, 256, 2, 16, 16, w_low=-0.6065, w_high=0.0, seed=1)
    xs32 = [t.float().requires_grad_() for t in xs64]
    xs64 = [t.requires_grad_() for t in xs64]
    got, want = rwkv7_chunked(*xs32), transitions(*xs64)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=3e-5)
    torch.testing.assert_close(rwkv7_naive(*xs32).double(), want, rtol=1e-5, atol=3e-5)
    grad = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for g_got, g_want in zip(torch.autograd.grad(got, xs32, grad.float()), torch.autograd.grad(want, xs64, grad)):
        torch.testing.assert_close(g_got.double(), g_want, rtol=1e-5, atol=1e-4)


def test_rwkv7_dispatches_chunked():
    xs = layer_inputs(2, 20, 2, 4, 4, dtype=torch.float32)
    backend.clear()
    got = rwkv7(*xs, backend="chunked")
    assert backend.last_backend("rwkv7") == "chunked"
    torch.testing.assert_close(got, rwkv7(*xs, backend="naive"), rtol=1e-5, atol=1e-5)
    assert backend.last_backend("rwkv7") == "naive"
    rwkv7(*xs, backend="auto")
    assert backend.last_backend("rwkv7") == "naive"  # CPU tensors keep the recurrence under auto
    with pytest.raises(ValueError, match="expected one of auto, fla, triton_chunk, triton, chunked, naive"):
        rwkv7(*xs, backend="chunk")
