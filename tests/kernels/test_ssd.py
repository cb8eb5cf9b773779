"""Mamba-2's SSD: the quadratic reference against the state recurrence, the chunked form against the reference, in
float32 and with bf16 / fp16 matmul operands; the compiled chunked form against the eager one; the Triton kernels
(the GPU path) against the reference under the interpreter and on a GPU."""
import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.backend import Compiled
from zoo.kernels.ssd import compiled, ssd
from zoo.kernels.ssd.chunked import ssd_chunked
from zoo.kernels.ssd.compiled import ssd_compiled
from zoo.kernels.ssd.fused import ssd_fused
from zoo.kernels.ssd.naive import ssd_naive
from graph_capture import assert_replays_like_eager


def ssd_inputs(Bt: int, L: int, H: int = 3, P: int = 4, N: int = 5):
    """x [B, L, H, P], dt [B, L, H] > 0, A [H] < 0, B and C [B, L, N], D [H], float64."""
    torch.manual_seed(0)
    x = torch.randn(Bt, L, H, P, dtype=torch.float64)
    dt = torch.rand(Bt, L, H, dtype=torch.float64) + 0.05
    A = -torch.rand(H, dtype=torch.float64) * 2
    B, C = torch.randn(Bt, L, N, dtype=torch.float64), torch.randn(Bt, L, N, dtype=torch.float64)
    D = torch.randn(H, dtype=torch.float64)
    return x, dt, A, B, C, D


def outputs_and_grads(fn, inputs, **kwargs):
    """fn(*inputs)'s output and the gradients of a fixed random projection of it with respect to every input."""
    inputs = [t.detach().requires_grad_() for t in inputs]
    y = fn(*inputs, **kwargs)
    torch.manual_seed(1)
    grads = torch.autograd.grad((y.double() * torch.randn(y.shape, dtype=torch.float64).to(y.device)).sum(), inputs)
    return y, grads


def test_ssd_matches_recurrence():
    Bt, L, H, P, N = 2, 10, 3, 4, 5
    x, dt, A, B, C, D = ssd_inputs(Bt, L, H, P, N)
    S = torch.zeros(Bt, H, N, P, dtype=torch.float64)
    want = []
    for t in range(L):
        S = torch.exp(dt[:, t] * A)[..., None, None] * S + dt[:, t, :, None, None] * B[:, t, None, :, None] * x[:, t, :, None, :]
        want.append(torch.einsum("bhnp,bn->bhp", S, C[:, t]) + D[:, None] * x[:, t])
    torch.testing.assert_close(ssd_naive(x, dt, A, B, C, D).double(), torch.stack(want, dim=1), rtol=1e-5, atol=1e-5)


# padded to 3 chunks, 3 whole chunks, one chunk (no states carried), 8 chunks (the state carried through 6 chunks)
@pytest.mark.parametrize("L", [21, 24, 5, 60])
def test_chunked_matches_quadratic(L):
    """Outputs and gradients (D's through the scores' diagonal included), float64 inputs computed in float32."""
    inputs = ssd_inputs(2, L)
    got, got_grads = outputs_and_grads(ssd_chunked, inputs, chunk=8)
    want, want_grads = outputs_and_grads(ssd_naive, inputs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # the gradients sum float32 products over every chunk: their rounding depends on the CPU's matmul kernels (one
    # element of 600 was 1.2e-5 off on one CPU machine, within 1e-5 on others)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=5e-5)


def test_chunked_without_skip_matches_quadratic():
    x, dt, A, B, C, _ = ssd_inputs(2, 21)
    torch.testing.assert_close(ssd_chunked(x, dt, A, B, C, chunk=8), ssd_naive(x, dt, A, B, C), rtol=1e-5, atol=1e-5)


def test_float32_inputs_take_the_float32_path():
    """float32 in, float32 out, within 1e-5 of the float64 quadratic form: no matmul dropped to a lower precision."""
    inputs = ssd_inputs(2, 21)
    got = ssd_chunked(*(t.float() for t in inputs), chunk=8)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ssd_naive(*inputs), rtol=1e-5, atol=1e-5)


def test_chunked_is_float32_under_bf16_autocast():
    """Its einsums must not drop to bf16 under training's autocast: same result with and without it."""
    x, dt, A, B, C, D = (t.float() for t in ssd_inputs(2, 21))
    want = ssd_chunked(x, dt, A, B, C, D, chunk=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = ssd_chunked(x, dt, A, B, C, D, chunk=8)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_operands_stay_close_to_float32(dtype):
    """x, B, C in bf16 / fp16 (dt, A, D float32, as Mamba-2 passes them): the matmuls take operands in that dtype;
    output and gradients stay within that dtype's rounding of the float32 path on the same (rounded) inputs."""
    x, dt, A, B, C, D = ssd_inputs(2, 40, H=3, P=8, N=16)
    x, B, C = (t.to(dtype) for t in (x, B, C))
    dt, A, D = (t.float() for t in (dt, A, D))
    got, got_grads = outputs_and_grads(ssd_chunked, (x, dt, A, B, C, D), chunk=16)
    want, want_grads = outputs_and_grads(ssd_chunked, (x.float(), dt, A, B.float(), C.float(), D), chunk=16)
    assert got.dtype == dtype
    assert not torch.equal(got, want.to(dtype))  # not float32's result rounded once: the operands were rounded
    scale = want.abs().max().item()
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=1e-2 * scale)
    for g, w in zip(got_grads, want_grads):
        assert ((g.double() - w.double()).norm() / w.double().norm()).item() < 2e-2


def test_compiled_form_traces_as_one_graph_and_matches_the_eager_form():
    """torch.compile takes the chunked form whole (fullgraph: no graph break, its loop over chunks unrolled), here
    with the ``aot_eager`` backend, which runs the traced forward and backward graphs without generating code (CI's
    CPU need not have a C++ compiler): outputs and every gradient as the eager form's."""
    inputs = [t.float() for t in ssd_inputs(2, 21)]
    got, got_grads = outputs_and_grads(
        lambda *a: ssd_compiled(*a, fallback=False, compiler="aot_eager"), inputs)
    want, want_grads = outputs_and_grads(ssd_chunked, inputs)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_a_compile_failure_is_said_once_and_not_tried_again(monkeypatch, caplog):
    """Named explicitly, the compiled backend raises; with ``fallback`` (``Compiled``'s default, on which RWKV-7's
    compiled layer math relies) it returns None after saying why once, and does not try to compile again."""
    calls = []

    def broken(*args):
        calls.append(len(args))
        raise RuntimeError("no C++ compiler here\nmore detail")

    fresh = Compiled(ssd_chunked, "the SSD scan")
    fresh._by_compiler["inductor"] = broken  # as if torch.compile had wrapped it
    monkeypatch.setattr(compiled, "SSD_COMPILED", fresh)
    inputs = [t.float() for t in ssd_inputs(2, 9)]
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):  # named explicitly: no fallback
        ssd(*inputs, backend="compiled")
    assert ssd_compiled(*inputs) is None and ssd_compiled(*inputs) is None
    assert len(calls) == 2  # the second fallback call did not try again
    said = [r.getMessage() for r in caplog.records if "SSD scan" in r.getMessage()]
    assert said == ["zoo: torch.compile failed for the SSD scan (RuntimeError: no C++ compiler here); "
                    "it runs uncompiled instead"]


def strided(t: torch.Tensor, extra: int = 3) -> torch.Tensor:
    """t's values as a view into a wider tensor (its last dim strided), as Mamba-2 passes B and C (slices of the
    conv's output)."""
    wide = torch.zeros(*t.shape[:-1], t.shape[-1] + extra, dtype=t.dtype)
    wide[..., 1:1 + t.shape[-1]] = t
    return wide[..., 1:1 + t.shape[-1]]


# (Bt, L, H, P, N, chunk, block_p, skip): chunks that end past L; P over two programs, no skip; a single chunk;
# N and P no powers of two
@pytest.mark.parametrize("Bt, L, H, P, N, chunk, block_p, skip", [
    (2, 37, 3, 5, 7, 16, 64, True), (1, 40, 2, 20, 16, 16, 16, False), (2, 9, 2, 8, 20, 16, 64, True),
    (1, 50, 1, 3, 5, 32, 64, True)])
def test_triton_kernels_match_the_quadratic_form(Bt, L, H, P, N, chunk, block_p, skip):
    """Outputs and every gradient (dt's through the decays, the weights and x's scale; A's; B's and C's summed over
    heads and programs) of float32 inputs against the float64 reference, B and C strided as in Mamba-2."""
    x, dt, A, B, C, D = (t.float() for t in ssd_inputs(Bt, L, H, P, N))
    inputs = [x, dt, A, strided(B), strided(C)] + ([D] if skip else [])  # without D: no skip
    got, got_grads = outputs_and_grads(lambda *a: ssd_fused(*a, chunk=chunk, block_p=block_p), inputs)
    want, want_grads = outputs_and_grads(ssd_naive, [t.double() for t in inputs])
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    assert len(got_grads) == len(inputs)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4)


def test_triton_kernels_with_half_operands_match_the_chunked_form():
    """fp16 x, B and C (the interpreter has no bf16 matmul): the matmul operands and the stored states in x's dtype,
    as the chunked form rounds them, within fp16's rounding of it; dt, A and D float32 as in training."""
    x, dt, A, B, C, D = ssd_inputs(2, 40, H=2, P=16, N=16)
    inputs = [x.half(), dt.float() * 0.3, A.float(), strided(B.half()), strided(C.half()), D.float()]
    got, got_grads = outputs_and_grads(lambda *a: ssd_fused(*a, chunk=16), inputs)
    want, want_grads = outputs_and_grads(lambda *a: ssd_chunked(*a, chunk=16), inputs)
    assert got.dtype == torch.float16
    assert ((got.float() - want.float()).norm() / want.float().norm()).item() < 2e-3
    for g, w in zip(got_grads, want_grads):
        assert g.dtype == w.dtype
        assert ((g.double() - w.double()).norm() / w.double().norm()).item() < 2e-3


def test_triton_kernels_give_the_same_bits_twice():
    """No atomics: the partial sums over heads and programs are summed in a fixed order."""
    inputs = [t.float() for t in ssd_inputs(2, 20, H=2, P=20, N=6)]
    first = outputs_and_grads(lambda *a: ssd_fused(*a, chunk=16, block_p=16), inputs)
    second = outputs_and_grads(lambda *a: ssd_fused(*a, chunk=16, block_p=16), inputs)
    assert all(torch.equal(a, b) for a, b in zip((first[0], *first[1]), (second[0], *second[1])))


def test_triton_kernels_refuse_a_chunk_that_is_no_power_of_two():
    with pytest.raises(ValueError, match="chunk=24"):
        ssd_fused(*(t.float() for t in ssd_inputs(1, 4)), chunk=24)


def test_triton_kernels_refuse_a_launch_for_no_kernel():
    with pytest.raises(ValueError, match=r"launch key\(s\) \['bwd'\].*'dbc', 'dstate', 'dx', 'fwd'"):
        ssd_fused(*(t.float() for t in ssd_inputs(1, 4)), launch={"bwd": (4, 1)})


GPU_SSD = dict(Bt=4, L=200, H=4, P=64, N=128)  # Mamba-2's heads at d_model=128; 200 steps: the last chunk partial


def gpu_inputs(dtype):
    x, dt, A, B, C, D = ssd_inputs(GPU_SSD["Bt"], GPU_SSD["L"], GPU_SSD["H"], GPU_SSD["P"], GPU_SSD["N"])
    x, B, C = (t.cuda().to(dtype) for t in (x, B, C))
    return x, *(t.cuda().float() for t in (dt * 0.1, A)), B, C, D.cuda().float()


@pytest.mark.gpu
def test_triton_kernels_on_gpu_match_the_quadratic_form_in_float32():
    """Float32 operands (IEEE, no TF32) on the GPU against the float64 reference."""
    inputs = gpu_inputs(torch.float32)
    got, got_grads = outputs_and_grads(ssd_fused, inputs)
    want, want_grads = outputs_and_grads(ssd_naive, [t.double() for t in inputs])
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    for g, w in zip(got_grads, want_grads):
        assert ((g.double() - w).norm() / w.norm()).item() < 1e-5


@pytest.mark.gpu
def test_auto_runs_the_triton_kernels_on_gpu():
    """Training's call (bf16 x, B, C under autocast; float32 dt, A, D): "auto" on a GPU runs the Triton kernels. Their
    output and every gradient are as close to the float64 quadratic form (of the same bf16 values) as the chunked
    form's, which rounds its matmul operands to bf16 too, give or take a factor 2. (Against the chunked form itself
    A's gradient, a sum of 65536 terms that largely cancel, differs by over 1%: the two round different products.)"""
    inputs = gpu_inputs(torch.bfloat16)
    backend.clear()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = outputs_and_grads(ssd, inputs)
        assert backend.last_backend("ssd") == "triton"
        chunked = outputs_and_grads(ssd, inputs, backend="chunked")
    assert backend.last_backend("ssd") == "chunked"
    exact = outputs_and_grads(ssd_naive, [t.double() for t in inputs])
    names = ["y", "dx", "ddt", "dA", "dB", "dC", "dD"]
    errors = {name: [((t.double() - e).norm() / e.norm()).item() for t in (ours, theirs)]
              for name, ours, theirs, e in zip(names, (got[0], *got[1]), (chunked[0], *chunked[1]),
                                               (exact[0], *exact[1]))}
    assert got[0].dtype == torch.bfloat16 and [g.dtype for g in got[1]] == [t.dtype for t in inputs]
    assert all(ours <= 2 * theirs + 1e-3 for ours, theirs in errors.values()), errors


@pytest.mark.gpu
def test_triton_kernels_are_captured_by_a_cuda_graph():
    """No host sync: forward and backward replay from a graph, with the same bits as eagerly."""
    x, dt, A, B, C, D = (t.detach().requires_grad_() for t in gpu_inputs(torch.bfloat16))
    dy = torch.randn(x.shape, device="cuda", dtype=torch.bfloat16)

    def step():
        y = ssd_fused(x, dt, A, B, C, D)
        return y.detach(), *torch.autograd.grad(y, (x, dt, A, B, C, D), dy)

    assert_replays_like_eager(step, x)


@pytest.mark.gpu
def test_the_compiled_form_on_gpu_matches_the_eager_one():
    """Training's call (bf16 x, B, C under autocast; float32 dt, A, D), the compiled form named: it matches the
    eager chunked form up to the fused kernels' rounding."""
    x, dt, A, B, C, D = gpu_inputs(torch.bfloat16)
    backend.clear()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got, got_grads = outputs_and_grads(ssd, (x, dt, A, B, C, D), backend="compiled")
        assert backend.last_backend("ssd") == "compiled"
        want, want_grads = outputs_and_grads(ssd, (x, dt, A, B, C, D), backend="chunked")
    assert backend.last_backend("ssd") == "chunked"
    scale = want.float().abs().max().item()
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=1e-2 * scale)
    for g, w in zip(got_grads, want_grads):
        assert ((g.double() - w.double()).norm() / w.double().norm()).item() < 1e-2
