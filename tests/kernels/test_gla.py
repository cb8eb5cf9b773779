"""Gated linear attention's recurrence against its closed (quadratic) form, and fla's chunked ops (gla and
retention) against it on GPU."""
import pytest
import torch

from zoo.kernels.backend import fla_chunks_unreliable
from zoo.kernels.gla import gla
from zoo.kernels.gla.naive import gla_recurrent
from zoo.kernels.retention import retention
from zoo.kernels.retention.naive import retention_log_decay


def closed_form(q, k, v, g, scale):
    """o_t = scale * sum_{s<=t} sum_c q_tc k_sc exp(G_tc - G_sc) v_s, with G the running sum of g."""
    G = g.expand_as(k).cumsum(1)
    w = (q[:, :, None] * k[:, None] * torch.exp(G[:, :, None] - G[:, None])).sum(-1)  # [B, T, S, H]
    w = w * torch.ones(q.shape[1], q.shape[1], dtype=q.dtype).tril()[None, :, :, None]
    return scale * torch.einsum("btsh,bshv->bthv", w, v)


def inputs(B, T, H, K, V, dtype=torch.float64, device="cpu", gate_shape=None):
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, K, dtype=dtype, device=device)) if gate_shape is None \
        else -torch.rand(gate_shape, dtype=dtype, device=device)
    return (torch.randn(B, T, H, K, dtype=dtype, device=device), torch.randn(B, T, H, K, dtype=dtype, device=device),
            torch.randn(B, T, H, V, dtype=dtype, device=device), g)


def test_recurrence_matches_closed_form():
    torch.manual_seed(0)
    q, k, v, g = inputs(2, 7, 3, 4, 5)
    torch.testing.assert_close(gla_recurrent(q, k, v, g, scale=0.3), closed_form(q, k, v, g, 0.3))
    torch.testing.assert_close(gla_recurrent(q, k, v, g), closed_form(q, k, v, g, 4 ** -0.5))


def test_head_wise_decay_broadcasts():
    """RetNet's constant gate [H, 1] is the per-channel gate repeated over time and channels."""
    torch.manual_seed(0)
    q, k, v, _ = inputs(1, 6, 3, 4, 2)
    g = retention_log_decay(3).double()[:, None]
    full = g.expand(1, 6, 3, 4)
    torch.testing.assert_close(gla_recurrent(q, k, v, g), closed_form(q, k, v, full, 0.5))


def relative_error(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.gpu
@pytest.mark.parametrize("T", [64, 100])
def test_fla_chunk_ops_match_recurrence_on_gpu(T):
    if fla_chunks_unreliable(0):
        pytest.skip(fla_chunks_unreliable(0))  # "auto" uses the recurrence here (see zoo.kernels.backend)
    torch.manual_seed(0)
    q, k, v, g = (t.float().requires_grad_() for t in inputs(2, T, 4, 32, 64, device="cuda"))
    gy = torch.randn_like(v)
    for op, args in ((gla, (q, k, v, g)), (retention, (q, k, v))):
        got, want = op(*args, backend="fla"), op(*args, backend="naive")
        grads_got = torch.autograd.grad(got, (q, k, v), gy)
        grads_want = torch.autograd.grad(want, (q, k, v), gy)
        assert relative_error(got, want) < 5e-3  # fla's chunks multiply in tf32
        for a, b in zip(grads_got, grads_want):
            assert relative_error(a, b) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("T", [64, 100])
def test_fla_fused_recurrent_ops_match_recurrence_on_gpu(T):
    """fla's fused recurrences, which "auto" runs where fla's chunks are unreliable (Hopper, Triton < 3.7.1)."""
    torch.manual_seed(0)
    q, k, v, g = (t.float().requires_grad_() for t in inputs(2, T, 4, 32, 64, device="cuda"))
    gy = torch.randn_like(v)
    for op, args in ((gla, (q, k, v, g)), (retention, (q, k, v))):
        got, want = op(*args, backend="fla_recurrent"), op(*args, backend="naive")
        assert got.dtype == want.dtype and got.shape == want.shape
        grads_got = torch.autograd.grad(got, args, gy)
        grads_want = torch.autograd.grad(want, args, gy)
        assert relative_error(got, want) < 5e-3
        for a, b in zip(grads_got, grads_want):
            assert relative_error(a, b) < 1e-2
