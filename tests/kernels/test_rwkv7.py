"""RWKV-7's state recurrence against explicit transition matrices."""
import torch

from zoo.kernels.rwkv7.naive import rwkv7_naive

from rwkv7_reference import transitions


def test_recurrence_matches_transition_matrices():
    torch.manual_seed(0)
    B, L, H, K = 2, 6, 2, 3
    r, k, v, a, b = (torch.randn(B, L, H, K, dtype=torch.float64) for _ in range(5))
    w = -torch.rand(B, L, H, K, dtype=torch.float64)
    torch.testing.assert_close(rwkv7_naive(r, w, k, v, a, b).double(), transitions(r, w, k, v, a, b),
                               rtol=1e-5, atol=1e-5)
