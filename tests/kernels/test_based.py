"""BASED's quadratic Taylor attention against running sums over the explicit feature map."""
import torch

from zoo.kernels.based.naive import EPS, based_naive


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
