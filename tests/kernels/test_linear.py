"""``zoo.kernels.linear``: the Triton column sum (interpreted on CPU) against ``torch.sum``, and the layer against
``F.linear`` (output and all three gradients, float32 and under bf16 autocast, strided output gradients); the
``Linear`` module's state dict; on a GPU, the recorded backend, bf16 and CUDA graphs."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels import backend
from zoo.kernels.linear import Linear, linear
from zoo.kernels.partial_sums import column_sum
from graph_capture import assert_replays_like_eager


@pytest.mark.parametrize("M,N", [(1, 1), (7, 3), (100, 37), (300, 200), (129, 128)])
def test_column_sum_matches_torch(M, N):
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(M))
    got = column_sum(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, x.sum(0), rtol=1e-5, atol=1e-5)


def test_column_sum_reads_strided_rows_bf16_an_empty_input_and_float64():
    wide = torch.randn(50, 30)
    torch.testing.assert_close(column_sum(wide[:, 5:25]), wide[:, 5:25].sum(0), rtol=1e-5, atol=1e-5)
    half = wide.bfloat16()
    torch.testing.assert_close(column_sum(half), half.float().sum(0), rtol=1e-5, atol=1e-5)
    assert torch.equal(column_sum(torch.empty(0, 4)), torch.zeros(4))
    exact = torch.randn(300, 7, dtype=torch.float64)
    assert column_sum(exact).dtype == torch.float64 and torch.equal(column_sum(exact), exact.sum(0))


def run(name, x, w, b, dy, bf16=False):
    """y and the gradients of x, w and b (if not None) through ``linear`` on backend ``name``."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        y = linear(*leaves, *([None] if b is None else []), backend=name)
    assert backend.last_backend("linear") == name
    y.backward(dy.to(y.dtype))
    return y, *(t.grad for t in leaves)


def inputs(device="cpu", K=16, N=24):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g).to(device) for s in ((3, 40, K), (N, K), (N,), (3, 40, N))]


def test_triton_matches_f_linear_in_float32():
    for got, want in zip(run("triton", *inputs()), run("naive", *inputs())):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_under_bf16_autocast_dtypes_and_matmul_gradients_are_f_linear_s():
    got, want = run("triton", *inputs(), bf16=True), run("naive", *inputs(), bf16=True)
    assert [t.dtype for t in got] == [t.dtype for t in want] == [torch.bfloat16] + [torch.float32] * 3
    for g, w in zip(got[:3], want[:3]):  # output, x and weight gradients: the same bf16 matmuls
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    # the bias gradient is summed in float32 and rounded once; PyTorch rounds its sum to bf16 first
    torch.testing.assert_close(got[3], want[3], rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(got[3], inputs()[3].bfloat16().float().sum((0, 1)), rtol=1e-5, atol=1e-4)


def test_a_strided_output_gradient_and_inputs_without_gradient():
    x, w, b, dy = inputs()
    dy = dy.transpose(0, 1).contiguous().transpose(0, 1)  # same values, rows not contiguous
    for got, want in zip(run("triton", x, w, b, dy), run("naive", x, w, b, dy)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    wl = w.clone().requires_grad_()
    linear(x, wl, b, backend="triton").sum().backward()  # only the weight needs a gradient
    torch.testing.assert_close(wl.grad, run("naive", x, w, b, torch.ones_like(dy))[2], rtol=1e-5, atol=1e-5)


def test_module_is_an_nn_linear_with_its_state_dict_and_runs_without_a_bias():
    layer, plain = Linear(6, 4), torch.nn.Linear(6, 4)
    layer.load_state_dict(plain.state_dict())
    assert isinstance(layer, torch.nn.Linear) and list(layer.state_dict()) == ["weight", "bias"]
    x = torch.randn(2, 5, 6)
    torch.testing.assert_close(layer(x), plain(x))
    no_bias = Linear(6, 4, bias=False)
    torch.testing.assert_close(no_bias(x), F.linear(x, no_bias.weight))
    assert backend.last_backend("linear") == "naive"
    x, w, _, dy = inputs()
    for bf16 in (False, True):  # the Function without a bias: F.linear's output, x and weight gradients
        got, want = run("triton", x, w, None, dy, bf16), run("naive", x, w, None, dy, bf16)
        assert len(got) == len(want) == 3
        for g, r in zip(got, want):
            assert g.dtype == r.dtype
            torch.testing.assert_close(g, r, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_auto_runs_triton_and_matches_f_linear_under_bf16_autocast():
    x, w, b, dy = inputs("cuda", K=128, N=384)
    x, dy = x.repeat(64, 8, 1), dy.repeat(64, 8, 1)  # 61440 rows, as MQAR's projections see
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = linear(*leaves)
    assert backend.last_backend("linear") == "triton"
    y.backward(dy.bfloat16())
    want = run("naive", x, w, b, dy, bf16=True)
    # the same bf16 matmuls, though cuBLAS may pick another algorithm for another operand layout
    for got, ref in zip((y, leaves[0].grad, leaves[1].grad), want[:3]):
        assert got.dtype == ref.dtype
        torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(leaves[2].grad, dy.bfloat16().float().sum((0, 1)), rtol=1e-5, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("bias", [True, False])
def test_gpu_weight_gradient_is_the_float32_sum_of_the_bf16_products(bias):
    """Under bf16 autocast the float32 weight's gradient comes out of cuBLAS in float32 (``grads.weight_grad``): the
    float32 product of the bf16 operands, closer to it than autocast's bf16-rounded gradient is."""
    x, w, b, dy = inputs("cuda", K=128, N=384)
    x, dy = x.repeat(64, 8, 1), dy.repeat(64, 8, 1)
    leaves = [t.clone().requires_grad_() for t in (x, w)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = linear(*leaves, b.clone().requires_grad_() if bias else None)
    assert backend.last_backend("linear") == "triton"
    y.backward(dy.bfloat16())
    exact = dy.bfloat16().double().flatten(0, 1).t() @ x.bfloat16().double().flatten(0, 1)
    rounded = run("naive", x, w, b, dy, bf16=True)[2]
    assert leaves[1].grad.dtype == torch.float32
    err = (leaves[1].grad.double() - exact).abs().max()
    assert err < 1e-3 * exact.abs().max() and err < (rounded.double() - exact).abs().max()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_forward_and_bias_gradient_replay_in_a_cuda_graph():
    x, w, b, _ = inputs("cuda")
    leaf = b.requires_grad_()

    def step():
        leaf.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = linear(x, w, leaf)
        (y.float() ** 2).sum().backward()
        return y.detach(), leaf.grad

    assert_replays_like_eager(step, leaf)


@pytest.mark.parametrize("M,K,N,bias", [(300, 16, 24, True), (257, 64, 40, False), (1000, 100, 130, True),
                                        (129, 128, 300, True), (100, 200, 50, False)])
def test_streaming_projection_matches_float64(M, K, N, bias):
    """The Triton forward (interpreted; float32): row blocks walked by two programs or one per column block, ragged
    edges in every dimension, x's rows strided (a column slice of a wider tensor)."""
    from zoo.kernels.linear.streaming import project_triton

    g = torch.Generator().manual_seed(M)
    wide = torch.randn(M, K + 5, generator=g)
    x, w = wide[:, 3:3 + K], torch.randn(N, K, generator=g)
    b = torch.randn(N, generator=g) if bias else None
    y = project_triton(x, w, b)
    want = x.double() @ w.double().t() + (b.double() if bias else 0)
    assert y.dtype == torch.float32 and y.shape == (M, N) and y.is_contiguous()
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(project_triton(x.reshape(4, -1, K) if M % 4 == 0 else x, w, b),
                               y.view(4, -1, N) if M % 4 == 0 else y, rtol=0, atol=0)


def test_streaming_projection_conditions_and_a_too_long_reduction():
    from zoo.kernels.linear.forward import project, streams
    from zoo.kernels.linear.streaming import LARGEST_K, project_triton

    x, w = torch.randn(8, 4), torch.randn(3, 4)
    assert not streams(x, w) and not streams(x.bfloat16(), w.bfloat16())  # a CPU tensor: F.linear
    torch.testing.assert_close(project(x, w, None), F.linear(x, w))
    assert backend.last_backend("projection") == "torch"
    with pytest.raises(ValueError, match=f"K={LARGEST_K + 1} is not valid: expected at most {LARGEST_K}"):
        project_triton(torch.randn(2, LARGEST_K + 1), torch.randn(3, LARGEST_K + 1), None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("K,N,bias", [(128, 384, True), (128, 128, False), (64, 200, True)])
def test_gpu_projection_streams_tall_bf16_inputs_and_matches_cublas(K, N, bias):
    """Tall, narrow bf16 projections take the Triton forward (recorded), within a bf16 rounding of cuBLAS's, inside
    ``linear`` too; too few rows, too wide an output, too long a reduction and float32 stay with cuBLAS."""
    from zoo.kernels.linear.forward import MAX_K, MAX_N, MIN_ROWS, project

    g = torch.Generator().manual_seed(K)
    x = torch.randn(MIN_ROWS * 4 + 3, K, generator=g).cuda().bfloat16()
    w, b = (torch.randn(N, K, generator=g) * K ** -0.5).cuda(), torch.randn(N, generator=g).cuda()
    b16 = b.bfloat16() if bias else None
    y = project(x, w.bfloat16(), b16)
    assert backend.last_backend("projection") == "triton"
    want = F.linear(x, w.bfloat16(), b16)
    exact = x.double() @ w.bfloat16().double().t() + (b16.double() if bias else 0)
    assert (y.double() - exact).abs().max() <= 2 ** -8 * exact.abs().max()  # one rounding of float32 sums
    torch.testing.assert_close(y, want, rtol=2 ** -7, atol=2 ** -7 * float(want.abs().max()))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        torch.testing.assert_close(linear(x[:4 * MIN_ROWS].view(4, MIN_ROWS, K), w, b if bias else None),
                                   y[:4 * MIN_ROWS].view(4, MIN_ROWS, N), rtol=0, atol=0)
    assert backend.last_backend("projection") == "triton"
    wide = torch.randn(MAX_N + 1, K).cuda().bfloat16()
    long = torch.randn(MIN_ROWS, MAX_K + 1).cuda().bfloat16()
    for args in ((x[:MIN_ROWS - 1], w.bfloat16(), b16), (x.float(), w, b), (x, wide, None),
                 (long, torch.randn(N, MAX_K + 1).cuda().bfloat16(), None)):
        project(*args)
        assert backend.last_backend("projection") == "cublas"
