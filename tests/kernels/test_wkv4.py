"""WKV-4: the recurrence against the explicit sum, and the Triton kernel against the recurrence."""
import pytest
import torch

from zoo.kernels.backend import last_backend
from zoo.kernels.wkv4 import wkv4 as wkv4_entry
from zoo.kernels.wkv4.fused_recurrent import MIN_PROGRAMS, Launch, _block_c, wkv4
from zoo.kernels.wkv4.naive import wkv4_naive


def gated_naive(w, u, k, v, r):
    """RWKV's receptance gate on the recurrence, as the mixer computed it before the kernels took it in."""
    return torch.sigmoid(r) * wkv4_naive(w, u, k, v)


def wkv4_explicit(w, u, k, v):
    """Straight from the definition, no stabilization (float64, small k)."""
    B, L, C = k.shape
    y = torch.empty_like(k)
    for t in range(L):
        i = torch.arange(t, dtype=k.dtype)
        weight = torch.exp(-(t - 1 - i)[None, :, None] * w + k[:, :t])  # (B, t, C)
        bonus = torch.exp(u + k[:, t])
        y[:, t] = ((weight * v[:, :t]).sum(1) + bonus * v[:, t]) / (weight.sum(1) + bonus)
    return y


def inputs(B, L, C, dtype, device="cpu", k_scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.rand(C, generator=g) * 2 + 0.05).to(device, dtype)
    u = torch.randn(C, generator=g).to(device, dtype)
    k = (torch.randn(B, L, C, generator=g) * k_scale).to(device, dtype)
    v = torch.randn(B, L, C, generator=g).to(device, dtype)
    return [t.requires_grad_() for t in (w, u, k, v)]


def grads(fn, args, gy):
    y = fn(*args)
    return [y, *torch.autograd.grad(y, args, gy.to(y.dtype))]


def test_naive_matches_explicit_sum():
    args = inputs(2, 12, 5, torch.float64)
    torch.testing.assert_close(wkv4_naive(*args), wkv4_explicit(*args))


def test_naive_is_stable_for_large_keys():
    w, u, k, v = inputs(1, 16, 4, torch.float32, k_scale=60.0)  # e^{k} overflows float32 without the max shift
    assert torch.isfinite(wkv4_naive(w, u, k, v)).all()


@pytest.mark.parametrize("shape", [(2, 9, 5), (1, 17, 70)])
def test_triton_matches_naive(shape):
    args = inputs(*shape, torch.float64, k_scale=3.0)
    gy = torch.randn(shape, dtype=torch.float64)
    for got, want in zip(grads(wkv4, args, gy), grads(wkv4_naive, args, gy)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 64, 128), (3, 257, 96), (4, 256, 256)])
def test_triton_matches_naive_on_gpu(shape):
    args = inputs(*shape, torch.float32, device="cuda", k_scale=3.0)
    gy = torch.randn(shape, device="cuda")
    for got, want in zip(grads(wkv4, args, gy), grads(wkv4_naive, args, gy)):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


def test_triton_reads_bf16_keys_and_values_and_gives_bf16_gradients():
    """As under autocast: bf16 k, v from the projections, float32 w, u; y stays float32. The reference runs in float32
    on the same values. The interpreter truncates float32 to bf16 instead of rounding it: within one bf16 step."""
    w, u, k, v = inputs(2, 9, 5, torch.float32, k_scale=3.0)
    k16, v16 = (t.detach().bfloat16().requires_grad_() for t in (k, v))
    k32, v32 = (t.detach().float().requires_grad_() for t in (k16, v16))
    gy = torch.randn(2, 9, 5)
    got = grads(wkv4, [w, u, k16, v16], gy)
    want = grads(wkv4_naive, [w, u, k32, v32], gy)
    assert [t.dtype for t in got] == [torch.float32] * 3 + [torch.bfloat16] * 2
    for g, ref in zip(got[:3], want[:3]):
        torch.testing.assert_close(g, ref, rtol=1e-4, atol=1e-5)
    for g, ref in zip(got[3:], want[3:]):
        torch.testing.assert_close(g.float(), ref, rtol=2 ** -7, atol=1e-5)


def _with_r(args, scale=2.0, seed=5):
    g = torch.Generator().manual_seed(seed)
    k = args[2]
    r = (torch.randn(k.shape, generator=g) * scale).to(k.device, k.dtype).requires_grad_()
    return [*args, r]


@pytest.mark.parametrize("shape", [(2, 9, 5), (1, 17, 70)])
def test_triton_gate_matches_the_gated_recurrence(shape):
    """With r the kernels return sigmoid(r) * y and give r's gradient (large |r| included: no overflow)."""
    args = _with_r(inputs(*shape, torch.float64, k_scale=3.0), scale=30.0)
    gy = torch.randn(shape, dtype=torch.float64)
    got = grads(lambda *a: wkv4(*a, out_dtype=torch.float64), args, gy)
    for g, want in zip(got, grads(gated_naive, args, gy)):
        torch.testing.assert_close(g.double(), want, rtol=1e-4, atol=1e-5)


def test_entry_gates_on_either_path_in_the_dtype_asked_for():
    args = _with_r(inputs(2, 9, 5, torch.float32, k_scale=3.0))
    want = gated_naive(*args)
    for backend in ("naive", "triton"):
        out = wkv4_entry(*args, out_dtype=torch.bfloat16, backend=backend)
        assert out.dtype == torch.bfloat16 and last_backend("wkv4") == backend
        torch.testing.assert_close(out.float(), want, rtol=2 ** -7, atol=1e-5)
    assert wkv4_entry(*args[:4], backend="naive").dtype == torch.float32  # no gate: y, float32
    for backend in ("naive", "triton"):
        with pytest.raises(ValueError, match=r"r.shape=\(2, 9, 4\) is not valid: expected k's shape \(2, 9, 5\)"):
            wkv4_entry(*args[:4], r=args[4][..., :4], backend=backend)


@pytest.mark.gpu
def test_triton_gate_runs_on_gpu_with_bf16_inputs():
    """As RWKV's layer calls it under autocast: bf16 k, v, r; the gated output in bf16, r's gradient in bf16; against
    the float32 recurrence on the same values, the output gradient included (the kernels get it in the output's
    bf16: given in float32, the reference's u gradient was 3% off at one channel, a sum that nearly cancels)."""
    w, u, k, v, r = _with_r(inputs(4, 256, 256, torch.float32, device="cuda", k_scale=3.0))
    low = [t.detach().bfloat16().requires_grad_() for t in (k, v, r)]
    ref = [t.detach().float().requires_grad_() for t in low]
    gy = torch.randn(4, 256, 256, device="cuda").bfloat16().float()
    got = grads(lambda *a: wkv4_entry(*a, out_dtype=torch.bfloat16), [w, u, *low], gy)
    assert last_backend("wkv4") == "triton"
    want = grads(gated_naive, [w, u, *ref], gy)
    assert got[0].dtype == torch.bfloat16 and got[-1].dtype == torch.bfloat16
    for g, ref_g in zip(got, want):
        torch.testing.assert_close(g.float(), ref_g, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("B, C, block", [(MIN_PROGRAMS // 4, 512, 128), (MIN_PROGRAMS // 8, 512, 64),
                                         (MIN_PROGRAMS // 16, 512, 32), (MIN_PROGRAMS // 64, 512, 32),
                                         (MIN_PROGRAMS, 16, 16)])
def test_channels_per_program_leave_enough_programs(B, C, block):
    """The most channels a program (of 128, 64, 32) that leaves MIN_PROGRAMS programs, else 32; never more than C
    rounded up to a power of two."""
    assert _block_c(B, C, Launch()) == block
    assert _block_c(B, C, Launch(block_c=64)) == min(64, C)  # C a power of two here


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_launch_choices_change_only_the_speed(device):
    """Every launch computes each channel's walk the same way: the same bits of y and of every gradient (the
    partial sums of w's and u's gradients are per sequence and channel whatever the launch)."""
    B, L, C = 2, 9, 70
    w, u, k, v = inputs(B, L, C, torch.float32, device=device, k_scale=3.0)
    r = torch.randn(B, L, C, device=device).requires_grad_()
    gy = torch.randn(B, L, C, device=device)
    results = []
    for launch in (Launch(), Launch(32, 1), Launch(128, 1), Launch(64, 4), Launch(32, 2)):
        y = wkv4(w, u, k, v, r, launch=launch)
        results.append((launch, [y, *torch.autograd.grad(y, (w, u, k, v, r), gy)]))
    for launch, got in results[1:]:
        for g, want in zip(got, results[0][1]):
            assert torch.equal(g, want), launch
