"""Selective scan: the recurrence against the explicit sum, and the Triton kernel (fused dt bias and softplus, D
skip and z gate) in its three modes (every state stored, every other state stored, chunked states recomputed)
against the recurrence, values and every gradient."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels import backend
from zoo.kernels.selective_scan import fused_recurrent, selective_scan as scan_entry
from zoo.kernels.selective_scan.fused_recurrent import selective_scan
from zoo.kernels.selective_scan.naive import selective_scan_naive

OPTIONS = ("D", "z", "delta_bias")
MODES = ("all", "half", "chunked")


def use_mode(monkeypatch, mode, chunk):
    """Make the Triton scan run in ``mode`` where the launch says "auto" (half at the test shapes): all by name,
    chunked with a zero budget (and ``chunk`` steps a chunk)."""
    if mode == "all":
        monkeypatch.setattr(fused_recurrent, "_states_mode",
                            lambda Bsz, L, E, N, states, dtype: "all" if states == "auto" else states)
    if mode == "chunked":
        monkeypatch.setattr(fused_recurrent, "STATE_BUDGET_BYTES", 0)
        monkeypatch.setattr(fused_recurrent, "CHUNK", chunk)


def scan_explicit(u, dt, A, B, C):
    """y_t[d] = sum_{s<=t} sum_n C_t[n] exp(A[d,n] sum_{s<r<=t} dt_r[d]) dt_s[d] B_s[n] u_s[d]."""
    Bt, L, D = u.shape
    cum = torch.cumsum(dt, dim=1)  # (Bt, L, D)
    y = torch.zeros_like(u)
    for t in range(L):
        for s in range(t + 1):
            decay = torch.exp(A * (cum[:, t] - cum[:, s])[..., None])  # (Bt, D, N)
            y[:, t] += torch.einsum("bdn,bn,bn->bd", decay, C[:, t], B[:, s]) * dt[:, s] * u[:, s]
    return y


def inputs(Bt, L, D, N, dtype, device="cpu", seed=0, options=()):
    """[u, dt, A, B, C] and {name: tensor} for each name in ``options``, all leaves that require grad. With a
    delta_bias (in [-4, -1], Mamba's init range before softplus), dt is a pre-softplus value around 0."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(Bt, L, D, generator=g)
    dt = torch.rand(Bt, L, D, generator=g) * 0.2 + 1e-3
    A = -torch.arange(1, N + 1, dtype=torch.float32).repeat(D, 1) * torch.rand(D, 1, generator=g)
    B, C = torch.randn(Bt, L, N, generator=g), torch.randn(Bt, L, N, generator=g)
    extra = {"D": torch.randn(D, generator=g), "z": torch.randn(Bt, L, D, generator=g),
             "delta_bias": torch.rand(D, generator=g) * 3 - 4}
    if "delta_bias" in options:
        dt = torch.randn(Bt, L, D, generator=g)

    def leaf(t):
        return t.to(device, dtype).requires_grad_()

    return [leaf(t) for t in (u, dt, A, B, C)], {k: leaf(extra[k]) for k in options}


def grads(fn, args, kwargs, gy, softplus=False):
    """[y, gradient of every tensor in args and kwargs]."""
    y = fn(*args, **kwargs, delta_softplus=softplus)
    return [y, *torch.autograd.grad(y, [*args, *kwargs.values()], gy.to(y.dtype))]


def assert_triton_matches_naive(shape, options, softplus, **tol):
    """Triton in float32 against the recurrence in float64 on the same values."""
    args, kwargs = inputs(*shape, torch.float32, options=options)
    gy = torch.randn(shape[:3])
    got = grads(selective_scan, args, kwargs, gy, softplus)
    args64 = [t.detach().double().requires_grad_() for t in args]
    kwargs64 = {k: t.detach().double().requires_grad_() for k, t in kwargs.items()}
    want = grads(selective_scan_naive, args64, kwargs64, gy, softplus)
    names = ["y", "u", "dt", "A", "B", "C", *options]
    for name, g, w in zip(names, got, want):
        torch.testing.assert_close(g.double(), w, **tol, msg=lambda m: f"{name}: {m}")


def test_naive_matches_explicit_sum():
    args, _ = inputs(2, 7, 3, 4, torch.float64)
    torch.testing.assert_close(selective_scan_naive(*args), scan_explicit(*args))


def test_naive_options_are_the_mamba_block_math():
    args, kw = inputs(2, 5, 3, 4, torch.float64, options=OPTIONS)
    u, dt, A, B, C = args
    want = (selective_scan_naive(u, F.softplus(dt + kw["delta_bias"]), A, B, C) + u * kw["D"]) * F.silu(kw["z"])
    torch.testing.assert_close(selective_scan_naive(*args, **kw, delta_softplus=True), want)


# (Bt, L, E, N), CHUNK (chunked mode), options, softplus: L a multiple of CHUNK, not one, and below it, odd and even;
# E below, above and not a multiple of the 32-channel block
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, chunk, options, softplus", [
    ((2, 7, 40, 4), 4, OPTIONS, True),
    ((2, 8, 3, 2), 4, ("D", "delta_bias"), False),
    ((1, 12, 8, 16), 16, (), False),
    ((2, 20, 5, 4), 16, OPTIONS, True),
    ((1, 6, 4, 4), 2, ("z",), True),
    ((2, 1, 5, 4), 4, OPTIONS, True),  # one step: h_L is the only state after h_0
])
def test_triton_matches_naive(monkeypatch, mode, shape, chunk, options, softplus):
    use_mode(monkeypatch, mode, chunk)
    assert_triton_matches_naive(shape, options, softplus, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_triton_takes_strided_low_precision_views(monkeypatch, device, mode):
    """x, z as halves of one bf16 projection and B, C as slices of another (Mamba's in_proj and x_proj): the kernel
    reads them in place, and its gradients come back in bf16, matching the recurrence on the same values."""
    Bt, L, E, N = 2, 5, 6, 4
    use_mode(monkeypatch, mode, chunk=2)  # L not a multiple of the chunk
    g = torch.Generator().manual_seed(1)
    xz = torch.randn(Bt, L, 2 * E, generator=g).bfloat16().requires_grad_()
    dbc = torch.randn(Bt, L, 3 + 2 * N, generator=g).bfloat16().requires_grad_()
    dt_raw = torch.randn(Bt, L, E, generator=g).bfloat16().requires_grad_()
    A, D, bias = (t.to(device) for t in (-torch.rand(E, N, generator=g) * 2, torch.randn(E, generator=g),
                                         torch.rand(E, generator=g) - 3))
    gy = torch.randn(Bt, L, E, generator=g).to(device)

    def run(fn, dtype):
        leaves = [t.detach().to(device, dtype).requires_grad_() for t in (xz, dbc, dt_raw)]
        x, z = leaves[0].chunk(2, dim=-1)
        _, B, C = leaves[1].split([3, N, N], dim=-1)
        y = fn(x, leaves[2], A, B, C, D, z, bias, True)
        return [t.cpu() for t in (y, *torch.autograd.grad(y, leaves, gy.to(y.dtype)))]

    got, want = run(selective_scan, torch.bfloat16), run(selective_scan_naive, torch.float64)
    assert got[0].dtype == torch.float32 and all(t.dtype == torch.bfloat16 for t in got[1:])
    torch.testing.assert_close(got[0].double(), want[0], rtol=1e-4, atol=1e-4)
    for g_, w in zip(got[1:], want[1:]):  # gradients rounded to bf16
        torch.testing.assert_close(g_.double(), w, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_bf16_states_change_the_gradients_by_their_rounding_alone(monkeypatch, device, mode):
    """``states_dtype=torch.bfloat16`` keeps the states for the backward in bf16 (half their memory): y is the same
    (the forward walks in float32 and only stores them), the gradients as close to float32 states' as bf16 rounding
    of the states allows. Float32 is the default; any other dtype is refused."""
    use_mode(monkeypatch, mode, chunk=4)
    shape = (2, 9, 40, 4) if device == "cpu" else (3, 70, 200, 16)
    args, kwargs = inputs(*shape, torch.float32, device=device, options=OPTIONS)
    args = [a.bfloat16() if a.dim() == 3 else a for a in args]  # u, dt, B, C in bf16; A float32
    kwargs["z"] = kwargs["z"].bfloat16()
    gy = torch.randn(shape[:3], device=device)
    half_bytes = fused_recurrent.Launch(states_dtype=torch.bfloat16)
    if device == "cpu":
        for launch, dtype in ((fused_recurrent.Launch(), torch.float32), (half_bytes, torch.bfloat16)):
            y = selective_scan(*args, **kwargs, delta_softplus=True, launch=launch)
            assert y.grad_fn.saved_tensors[-1].dtype == dtype
        with pytest.raises(ValueError, match="launch.states_dtype=torch.float16 is not valid"):
            selective_scan(*args, launch=fused_recurrent.Launch(states_dtype=torch.float16))
    want = grads(selective_scan, args, kwargs, gy, softplus=True)
    got = grads(lambda *a, **k: selective_scan(*a, **k, launch=half_bytes), args, kwargs, gy, softplus=True)
    assert torch.equal(got[0], want[0]) and len(got) == len(want) > 5
    for g, w in zip(got[1:], want[1:]):
        torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=2e-2 * w.float().abs().max().item())


@pytest.mark.parametrize("mode", MODES)
def test_triton_is_bit_reproducible(monkeypatch, mode):
    use_mode(monkeypatch, mode, chunk=4)
    args, kwargs = inputs(2, 9, 40, 4, torch.float32, options=OPTIONS)
    gy = torch.randn(2, 9, 40)
    first, second = (grads(selective_scan, args, kwargs, gy, softplus=True) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_triton_stores_y_in_the_dtype_asked(device):
    """A bf16 y is the float32 y rounded, as Mamba cast it after the scan (to nearest on a GPU; Triton's CPU
    interpreter may round the other way, one bf16 step), and every gradient is the same for the same bf16 output
    gradient."""
    shape = (2, 9, 40, 4) if device == "cpu" else (3, 70, 200, 16)
    args, kwargs = inputs(*shape, torch.float32, device=device, options=OPTIONS)
    gy = torch.randn(shape[:3], device=device).bfloat16()
    want = grads(lambda *a, **k: selective_scan(*a, **k).bfloat16(), args, kwargs, gy, softplus=True)
    got = grads(lambda *a, **k: selective_scan(*a, **k, out_dtype=torch.bfloat16), args, kwargs, gy, softplus=True)
    assert got[0].dtype == torch.bfloat16
    if device == "cuda":
        assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[0].float(), want[0].float(), rtol=2 ** -7, atol=0)
    assert all(torch.equal(g, w) for g, w in zip(got[1:], want[1:]))


LAUNCHES = [fused_recurrent.Launch(block_e=8, num_warps=1, num_stages=1, forward_block_e=16, forward_warps=1),
            fused_recurrent.Launch(block_e=16, num_warps=2, num_stages=3, forward_block_e=8, forward_warps=4),
            fused_recurrent.Launch(block_e=64, num_warps=1, num_stages=2, forward_block_e=128, forward_warps=2)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_launch_choices_change_only_the_speed(monkeypatch, device, mode):
    """Channels per program and warps of either kernel, and pipelining stages (the bench's choices) give the default
    launch's values (partial sums of dB, dC over other channel blocks: equal up to rounding)."""
    use_mode(monkeypatch, mode, chunk=4)
    shape = (2, 9, 40, 4) if device == "cpu" else (3, 70, 200, 16)
    args, kwargs = inputs(*shape, torch.float32, device=device, options=OPTIONS)
    gy = torch.randn(shape[:3], device=device)
    want = grads(selective_scan, args, kwargs, gy, softplus=True)
    for launch in LAUNCHES:
        got = grads(lambda *a, **k: selective_scan(*a, **k, launch=launch), args, kwargs, gy, softplus=True)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=lambda m: f"{launch}: {m}")


@pytest.mark.parametrize("L", [9, 10])
def test_triton_stores_every_other_state_within_the_budget_and_chunks_above_it_unless_told(monkeypatch, L):
    """Every other state (h_0, h_2, .. and h_L) within the budget, else the chunks'; every state (h_0 .. h_L) only
    by name."""
    Bt, E, N = 2, 3, 4
    monkeypatch.setattr(fused_recurrent, "CHUNK", 4)
    args, _ = inputs(Bt, L, E, N, torch.float32)
    n_half = (L + 1) // 2 + 1
    state = Bt * E * N * 4  # bytes of one float32 h_k of every sequence
    for budget, mode in ((n_half * state, "half"), (n_half * state - 1, "chunked")):
        monkeypatch.setattr(fused_recurrent, "STATE_BUDGET_BYTES", budget)
        assert selective_scan(*args).grad_fn.states == mode
        for states, n_states in (("all", L + 1), ("half", n_half), ("chunked", 3)):  # a named mode overrides it
            ctx = selective_scan(*args, launch=fused_recurrent.Launch(states=states)).grad_fn
            assert ctx.states == states and ctx.saved_tensors[-1].shape == (Bt, n_states, N, E)
    with pytest.raises(ValueError, match="launch.states='chunk' is not valid: expected one of auto, all, half, "
                                         "chunked"):
        selective_scan(*args, launch=fused_recurrent.Launch(states="chunk"))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape, options", [((2, 64, 256, 16), ()), ((3, 130, 100, 16), OPTIONS),
                                            ((2, 256, 64, 8), OPTIONS)])
def test_triton_matches_naive_on_gpu(monkeypatch, mode, shape, options):
    use_mode(monkeypatch, mode, chunk=fused_recurrent.CHUNK)
    args, kwargs = inputs(*shape, torch.float32, device="cuda", options=options)
    gy = torch.randn(shape[:3], device="cuda")
    backend.clear()
    got = grads(lambda *a, **k: scan_entry(*a, **k, backend="triton"), args, kwargs, gy, bool(options))
    assert backend.last_backend("selective_scan") == "triton"
    for g, w in zip(got, grads(selective_scan_naive, args, kwargs, gy, bool(options))):
        torch.testing.assert_close(g, w, rtol=2e-3, atol=2e-3)


def test_default_channels_per_program_leave_enough_programs():
    """Without ``block_e`` the launch takes 64 channels a program, or 32, while that leaves ``MIN_PROGRAMS``
    programs, else 16; never more channels than the input has (rounded up to a power of two)."""
    default = fused_recurrent.Launch()
    assert fused_recurrent._block_e(256, 256, default) == 64  # 1024 programs
    assert fused_recurrent._block_e(128, 512, default) == 64
    assert fused_recurrent._block_e(128, 256, default) == 32  # 64 would leave 512
    assert fused_recurrent._block_e(128, 128, default) == 16
    assert fused_recurrent._block_e(2, 3, default) == 4
    assert fused_recurrent._block_e(256, 256, fused_recurrent.Launch(block_e=8)) == 8
