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
