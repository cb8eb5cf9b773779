"""The (gated) delta rule against explicit transition matrices, its memory and eigenvalue properties,
and fla's chunked ops on GPU."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels.backend import fla_chunks_unreliable
from zoo.kernels.delta_rule import delta_rule
from zoo.kernels.delta_rule.naive import delta_rule_recurrent

from delta_rule_inputs import inputs


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("beta_max", [1.0, 2.0])
def test_recurrence_matches_transition_matrices(gated, beta_max):
    torch.manual_seed(0)
    B, T, H, K, V = 2, 6, 2, 3, 4
    q, k, v, beta, g = inputs(B, T, H, K, V, beta_max)
    S = torch.zeros(B, H, K, V, dtype=torch.float64)
    want = []
    for t in range(T):
        kt, bt = k[:, t, ..., :, None], beta[:, t, :, None, None]  # [B, H, K, 1], [B, H, 1, 1]
        A = torch.eye(K, dtype=torch.float64) - bt * kt @ kt.transpose(-1, -2)
        if gated:
            A = A * g[:, t].exp()[..., None, None]
        S = A @ S + bt * kt @ v[:, t, ..., None, :]
        want.append((q[:, t, ..., None, :] @ S).squeeze(-2) * 0.5)
    got = delta_rule_recurrent(q, k, v, beta, g if gated else None, scale=0.5)
    torch.testing.assert_close(got, torch.stack(want, 1))


def test_l2norm_option_normalizes_q_and_k():
    torch.manual_seed(0)
    q, k, v, beta, _ = inputs(1, 5, 2, 4, 3)
    q, k = 3 * q, 2 * k
    torch.testing.assert_close(delta_rule_recurrent(q, k, v, beta, l2norm_qk=True),
                               delta_rule_recurrent(F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, beta))


def test_unit_beta_overwrites_the_value_under_a_key():
    """beta = 1 and orthonormal keys: querying key j returns the last value written under it."""
    K, V = 4, 3
    keys = torch.eye(K, dtype=torch.float64)
    order = [0, 1, 2, 1, 3]  # key 1 written twice: the second value must replace the first
    k = keys[order][None, :, None]
    v = torch.randn(1, len(order), 1, V, dtype=torch.float64)
    T = len(order) + K
    k = torch.cat([k, torch.zeros(1, K, 1, K, dtype=torch.float64)], 1)  # then K reads (k = 0: no write)
    v = torch.cat([v, torch.zeros(1, K, 1, V, dtype=torch.float64)], 1)
    q = torch.cat([torch.zeros(1, len(order), 1, K, dtype=torch.float64), keys[None, :, None]], 1)
    o = delta_rule_recurrent(q, k, v, torch.ones(1, T, 1, dtype=torch.float64), scale=1.0)
    last = {key: v[0, t, 0] for t, key in enumerate(order)}
    torch.testing.assert_close(o[0, len(order):, 0], torch.stack([last[j] for j in range(K)]))


def carried_sign(beta):
    """Write 1 at t=0 under the unit key k=1 (K = V = 1), then only transitions: o_t = prod_{s<=t} (1 - beta_s)."""
    T = beta.shape[1]
    one = torch.ones(1, T, 1, 1, dtype=torch.float64)
    v = torch.zeros_like(one)
    v[:, 0] = 1
    beta = beta.clone()
    beta[:, 0] = 1  # the write itself
    return delta_rule_recurrent(one, one, v, beta, scale=1.0)[0, :, 0, 0]


def test_eigenvalues_in_unit_interval_never_flip_the_state():
    """beta in [0, 1]: the transition along k, 1 - beta, lies in [0, 1], so the carried value keeps its sign;
    beta in (1, 2] (negative eigenvalues) flips it."""
    torch.manual_seed(0)
    for _ in range(20):
        assert (carried_sign(torch.rand(1, 16, 1, dtype=torch.float64)) >= 0).all()
    flips = carried_sign(torch.full((1, 6, 1), 2.0, dtype=torch.float64))
    torch.testing.assert_close(flips, torch.tensor([1.0, -1, 1, -1, 1, -1], dtype=torch.float64))


def relative_error(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.gpu
@pytest.mark.parametrize("T", [64, 100])
@pytest.mark.parametrize("beta_max", [1.0, 2.0])
def test_fla_chunk_ops_match_recurrence_on_gpu(T, beta_max):
    if fla_chunks_unreliable(0):
        pytest.skip(fla_chunks_unreliable(0))  # "auto" uses the recurrence here (see zoo.kernels.backend)
    torch.manual_seed(0)
    # fla's chunk delta rule takes 16-bit inputs only; the recurrence sees the same rounded values in float32
    low = [t.bfloat16() for t in inputs(2, T, 4, 32, 64, beta_max, device="cuda")]
    q, k, v, beta, g = (t.requires_grad_() for t in low)
    q32, k32, v32, beta32, g32 = (t.detach().float().requires_grad_() for t in low)
    gy = torch.randn_like(v32)
    cases = [(lambda: delta_rule(q, k, v, beta, l2norm_qk=True, backend="fla"), (q, k, v, beta),
              lambda: delta_rule_recurrent(q32, k32, v32, beta32, l2norm_qk=True), (q32, k32, v32, beta32)),
             (lambda: delta_rule(q, k, v, beta, g, l2norm_qk=True, backend="fla"), (q, k, v, beta, g),
              lambda: delta_rule_recurrent(q32, k32, v32, beta32, g32, l2norm_qk=True), (q32, k32, v32, beta32, g32))]
    for fast, wrt, ref, wrt32 in cases:
        got, want = fast(), ref()
        assert relative_error(got.float(), want) < 3e-2  # bf16 inputs and outputs
        for a, b in zip(torch.autograd.grad(got, wrt, gy.bfloat16()), torch.autograd.grad(want, wrt32, gy)):
            assert relative_error(a.float(), b) < 5e-2


@pytest.mark.gpu
@pytest.mark.parametrize("T", [64, 100])
@pytest.mark.parametrize("beta_max", [1.0, 2.0])
def test_fla_fused_recurrent_delta_rule_matches_recurrence_on_gpu(T, beta_max):
    """fla's fused recurrence, which "auto" runs where fla's chunks are unreliable; beta up to 2 is DeltaNet
    with negative eigenvalues."""
    torch.manual_seed(0)
    q, k, v, beta, _ = (t.float().requires_grad_() for t in inputs(2, T, 4, 32, 64, beta_max, device="cuda"))
    gy = torch.randn_like(v)
    got = delta_rule(q, k, v, beta, l2norm_qk=True, backend="fla_recurrent")
    want = delta_rule_recurrent(q, k, v, beta, l2norm_qk=True)
    assert relative_error(got, want) < 5e-3
    for a, b in zip(torch.autograd.grad(got, (q, k, v, beta), gy), torch.autograd.grad(want, (q, k, v, beta), gy)):
        assert relative_error(a, b) < 1e-2


def test_gated_delta_rule_refuses_the_fused_recurrence():
    q, k, v, beta, g = inputs(1, 4, 2, 4, 4, 1.0)
    with pytest.raises(ValueError, match="fla_recurrent"):
        delta_rule(q, k, v, beta, g, backend="fla_recurrent")
