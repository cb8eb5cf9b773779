"""RWKV-7's state recurrence against explicit transition matrices."""
import torch

from zoo.kernels.rwkv7.naive import rwkv7_naive


def test_recurrence_matches_transition_matrices():
    torch.manual_seed(0)
    B, L, H, K = 2, 6, 2, 3
    r, k, v, a, b = (torch.randn(B, L, H, K, dtype=torch.float64) for _ in range(5))
    w = -torch.rand(B, L, H, K, dtype=torch.float64)
    S = torch.zeros(B, H, K, K, dtype=torch.float64)
    want = []
    for t in range(L):
        G = torch.diag_embed(torch.exp(w[:, t])) + b[:, t, ..., :, None] * a[:, t, ..., None, :]  # (B, H, K, K)
        S = G @ S + k[:, t, ..., :, None] * v[:, t, ..., None, :]
        want.append((r[:, t, ..., None, :] @ S).squeeze(-2))
    torch.testing.assert_close(rwkv7_naive(r, w, k, v, a, b).double(), torch.stack(want, 1), rtol=1e-5, atol=1e-5)
