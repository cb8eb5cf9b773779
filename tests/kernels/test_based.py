"""BASED's quadratic Taylor attention against running sums over the explicit feature map."""
import torch

from zoo.kernels.based.naive import EPS, based_naive, based_naive_at


def taylor_features(x):
    """phi(x) = [1, x / d^(1/4), vec(x x^T) / (sqrt(2) sqrt(d))], so phi(q).phi(k) = 1 + s + s^2/2."""
    d = x.shape[-1]
    outer = (x[..., :, None] * x[..., None, :]).flatten(-2)
    return torch.cat([torch.ones_like(x[..., :1]), x / d ** 0.25, outer / (2 ** 0.5 * d ** 0.5)], dim=-1)


def test_reference_matches_running_feature_sums():
    torch.manual_seed(0)
    B, L, H, F, V = 2, 9, 2, 4, 3
    q, k, v = torch.randn(B, L, H, F, dtype=torch.float64), torch.randn(B, L, H, F, dtype=torch.float64), torch.randn(B, L, H, V, dtype=torch.float64)
    fq, fk = taylor_features(q), taylor_features(k)
    kv = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=1)  # (B, L, H, F', V)
    z = torch.cumsum(fk, dim=1)
    want = torch.einsum("blhf,blhfv->blhv", fq, kv) / (torch.einsum("blhf,blhf->blh", fq, z)[..., None] + EPS)
    torch.testing.assert_close(based_naive(q, k, v), want)


def test_outputs_at_positions_are_the_full_outputs_rows_with_their_gradients():
    """``based_naive_at``: the labelled rows' queries against every key give the full form's rows there, values and
    gradients (float64); under bf16 autocast the weights are still float32 math and the output takes v's dtype."""
    torch.manual_seed(0)
    B, L, H, F, V = 2, 11, 2, 4, 3
    leaves = [torch.randn(B, L, H, n, dtype=torch.float64, requires_grad=True) for n in (F, F, V)]
    positions = torch.tensor([[0, 4, 10], [3, 3, 7]])
    rows = positions[:, :, None, None]
    do = torch.randn(B, 3, H, V, dtype=torch.float64)
    full = based_naive(*leaves).gather(1, rows.expand(B, 3, H, V))
    want = [full, *torch.autograd.grad(full, leaves, do)]
    q, k, v = leaves
    at = based_naive_at(q.gather(1, rows.expand(B, 3, H, F)), k, v, positions)
    got = [at, *torch.autograd.grad(at, leaves, do)]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    half = [t.detach().bfloat16() for t in leaves]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o = based_naive_at(half[0][:, :3], half[1], half[2], positions)
    exact = based_naive_at(*(t.float() for t in (half[0][:, :3], half[1], half[2])), positions)
    assert o.dtype == torch.bfloat16
    torch.testing.assert_close(o.float(), exact.bfloat16().float(), rtol=0, atol=0)
