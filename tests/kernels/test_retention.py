"""RetNet's retention reference against its definition: a fixed decay gamma_h = 1 - 2^(-5-h) per head."""
import torch

from zoo.kernels.retention.naive import retention_log_decay, retention_naive


def test_decays_are_one_minus_powers_of_two():
    torch.testing.assert_close(retention_log_decay(3).exp(), torch.tensor([1 - 1 / 32, 1 - 1 / 64, 1 - 1 / 128]))


def test_reference_matches_decayed_sum():
    """o_t = K^-1/2 sum_{s<=t} gamma_h^(t-s) (q_t . k_s) v_s."""
    torch.manual_seed(0)
    B, T, H, K, V = 2, 7, 3, 4, 5
    q, k, v = (torch.randn(B, T, H, d, dtype=torch.float64) for d in (K, K, V))
    gamma = retention_log_decay(H).double().exp()
    t = torch.arange(T, dtype=torch.float64)
    decay = (gamma[:, None, None] ** (t[:, None] - t[None, :])).tril()  # [H, T, S], zero above the diagonal
    want = torch.einsum("bthk,bshk,hts,bshv->bthv", q, k, decay, v) * K ** -0.5
    torch.testing.assert_close(retention_naive(q, k, v), want)
