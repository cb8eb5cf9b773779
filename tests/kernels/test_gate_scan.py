"""The Triton gate scan against a float64 recurrence, forward and gradients."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels.gatedfwa import gate_cumsum

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def recurrence(h, beta, eps):
    """u_t = u_{t-1} - softplus(beta_t h_t) / (beta_t + eps), one step at a time."""
    u, prev = [], torch.zeros_like(h[:, 0])
    for t in range(h.shape[1]):
        prev = prev - F.softplus(beta[:, t] * h[:, t]) / (beta[:, t] + eps)
        u.append(prev)
    return torch.stack(u, dim=1)


def inputs(B, T, H, dtype=torch.float64, extra_heads=0):
    torch.manual_seed(T * 31 + H)
    h = torch.randn(B, T, H + extra_heads, dtype=dtype, device=DEVICE)[..., :H] * 4
    h.view(-1)[0] = -80.0  # softplus far in both tails
    h[-1, -1, -1] = 80.0
    beta = torch.rand(B, T, H, dtype=dtype, device=DEVICE) * 2 + 0.1
    return h, beta


@pytest.mark.parametrize("B,T,H", [(1, 1, 1), (2, 37, 3), (1, 100, 5), (3, 64, 2)])
def test_triton_scan_matches_recurrence(B, T, H):
    h64, beta64 = inputs(B, T, H, extra_heads=2)  # h has a non-packed time stride
    h64.requires_grad_()
    beta64 = beta64.requires_grad_()
    ref = recurrence(h64, beta64, 1e-6)
    grad = torch.randn_like(ref)
    ref_dh, ref_dbeta = torch.autograd.grad(ref, (h64, beta64), grad)

    h, beta = h64.detach().float().requires_grad_(), beta64.detach().float().requires_grad_()
    u = gate_cumsum(h, beta, backend="triton")
    dh, dbeta = torch.autograd.grad(u, (h, beta), grad.float())
    assert u.dtype == torch.float32 and u.shape == (B, T, H)
    scale = ref.abs().max().item() + 1
    torch.testing.assert_close(u.double(), ref, atol=1e-6 * scale, rtol=1e-5)
    torch.testing.assert_close(dh.double(), ref_dh, atol=1e-4 * T, rtol=1e-4)
    torch.testing.assert_close(dbeta.double(), ref_dbeta, atol=1e-4 * T, rtol=1e-4)


def test_torch_backend_matches_recurrence():
    h, beta = inputs(2, 20, 3)
    torch.testing.assert_close(gate_cumsum(h, beta, backend="naive"), recurrence(h, beta, 1e-6))


def test_bad_backend_and_shapes_are_value_errors():
    h, beta = inputs(1, 4, 2)
    with pytest.raises(ValueError, match="backend"):
        gate_cumsum(h, beta, backend="cuda")
    with pytest.raises(ValueError, match="beta.shape"):
        gate_cumsum(h, beta[:, :3])


@pytest.mark.gpu
@pytest.mark.parametrize("B,T,H,dtype", [(1, 65536, 64, torch.bfloat16), (4, 3000, 16, torch.float32),
                                          (2, 513, 3, torch.bfloat16)])
def test_gpu_scan_long(B, T, H, dtype):
    h64, beta64 = inputs(B, T, H)
    h, beta = h64.to(dtype).requires_grad_(), beta64.to(dtype).requires_grad_()
    h64, beta64 = h.detach().double().requires_grad_(), beta.detach().double().requires_grad_()
    ref = gate_cumsum(h64, beta64, backend="naive")
    grad = torch.randn_like(ref)
    ref_dh, ref_dbeta = torch.autograd.grad(ref, (h64, beta64), grad)
    u = gate_cumsum(h, beta, backend="triton")
    dh, dbeta = torch.autograd.grad(u, (h, beta), grad.float())
    rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item()  # noqa: E731
    assert rel(u, ref) < 1e-5
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel(dh, ref_dh) < tol and rel(dbeta, ref_dbeta) < tol
