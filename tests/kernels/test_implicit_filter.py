"""Hyena's implicit filter, the fused Function (Triton under the interpreter on CPU) against the PyTorch
composition: the filter and every gradient, at sizes no tile divides, with one to three hidden layers, a strided
output gradient and z without a gradient; the entry's backend choice and bad input; on a GPU, bf16 autocast
around it (the Function stays float32) and a CUDA-graph replay."""
import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.implicit_filter import fused, implicit_filter
from zoo.kernels.implicit_filter.naive import implicit_filter_naive
from graph_capture import assert_replays_like_eager

L, E, F, D = 37, 5, 20, 13  # F > BLOCK_COLS and L > BLOCK_ROWS: several programs, partial tiles


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def inputs(n_layers=3, device="cpu", z_grad=True):
    """(z, weights, biases, freq, w_out, t, deltas): parameters as Hyena's filter holds them, leaves with
    gradients (z as ``z_grad`` says); t and deltas buffers."""
    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, device=device) * scale).requires_grad_()

    z = torch.randn(L, E, device=device).requires_grad_(z_grad)
    weights = [leaf(F, E if k == 0 else F, scale=0.5) for k in range(n_layers)]
    biases = [leaf(F) for _ in range(n_layers)]
    freq = (1 + torch.rand(F, device=device)).requires_grad_()
    t = torch.linspace(0, 1, L, device=device)[:, None]
    return z, weights, biases, freq, leaf(D, F, scale=0.3), t, torch.rand(D, device=device) * 10


def filter_and_grads(run, args, dout):
    z, weights, biases, freq, w_out, t, deltas = args
    h = run(*args)
    leaves = [x for x in (z, *weights, *biases, freq, w_out) if x.requires_grad]
    return (h, *torch.autograd.grad(h, leaves, dout))


@pytest.mark.parametrize("n_layers", [1, 2, 3])
def test_matches_reference(n_layers):
    args = inputs(n_layers)
    dout = torch.randn(L, D)
    got = filter_and_grads(fused.implicit_filter, args, dout)
    want = filter_and_grads(implicit_filter_naive, args, dout)
    assert got[0].dtype == torch.float32 and got[0].is_contiguous()
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_strided_output_gradient_and_z_without_gradient():
    """Hyena's long conv reads the filter transposed, so its gradient arrives as a transposed view; z may be a
    buffer (no gradient asked for it)."""
    args = inputs(z_grad=False)
    dout = torch.randn(D, L).t()
    got = filter_and_grads(fused.implicit_filter, args, dout)
    want = filter_and_grads(implicit_filter_naive, args, dout)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_bf16_parameters_give_a_float32_filter_and_gradients_in_their_dtype():
    """The math is float32 whatever the parameters' dtype; each gradient comes back in its parameter's dtype."""
    z, weights, biases, freq, w_out, t, deltas = inputs()
    bf16 = [x.detach().bfloat16().requires_grad_() for x in (z, *weights, *biases, freq, w_out)]
    z, weights, biases, freq, w_out = bf16[0], bf16[1:4], bf16[4:7], bf16[7], bf16[8]
    h = fused.implicit_filter(z, weights, biases, freq, w_out, t, deltas)
    want = implicit_filter_naive(z.float(), [w.float() for w in weights],
                                 [b.float() for b in biases], freq.float(), w_out.float(), t, deltas)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h, want, rtol=1e-5, atol=1e-5)
    grads = torch.autograd.grad(h.sum(), bf16)
    assert all(g.dtype == torch.bfloat16 for g in grads)


def test_float32_under_cpu_autocast():
    """Autocast of the tensors' own device is off inside, forward and backward (the CPU test that compiles every
    kernel for sm_90 trains under CPU autocast)."""
    args = inputs()
    dout = torch.randn(L, D)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = filter_and_grads(fused.implicit_filter, args, dout)
    want = filter_and_grads(implicit_filter_naive, args, dout)
    assert got[0].dtype == torch.float32
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_entry_runs_triton_when_named_and_the_reference_on_cpu():
    args = inputs()
    torch.testing.assert_close(implicit_filter(*args, backend="triton"), implicit_filter_naive(*args))
    assert backend.last_backend("implicit_filter") == "triton"
    implicit_filter(*args)
    assert backend.last_backend("implicit_filter") == backend.NAIVE


def test_bad_arguments_raise():
    z, weights, biases, freq, w_out, t, deltas = inputs()
    with pytest.raises(ValueError, match="backend='cuda' is not valid: expected one of auto, triton, naive"):
        implicit_filter(z, weights, biases, freq, w_out, t, deltas, backend="cuda")
    with pytest.raises(ValueError, match="3 weights and 2 biases"):
        implicit_filter(z, weights, biases[:2], freq, w_out, t, deltas)


@pytest.mark.gpu
def test_gpu_filter_under_autocast_is_float32_and_matches_the_reference():
    """Training's path: bf16 autocast around the Function, whose math stays float32; against the float32
    reference on CPU."""
    args = inputs(device="cuda")
    dout = torch.randn(L, D, device="cuda")
    backend.clear()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = filter_and_grads(implicit_filter, args, dout)
    assert backend.last_backend("implicit_filter") == "triton"
    cpu = [x.detach().cpu().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else
           [w.detach().cpu().requires_grad_() for w in x] for x in args]
    want = filter_and_grads(implicit_filter_naive, cpu, dout.cpu())
    assert got[0].dtype == torch.float32
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_forward_and_backward_are_captured_by_a_cuda_graph():
    z, weights, biases, freq, w_out, t, deltas = args = inputs(device="cuda")
    dout = torch.randn(L, D, device="cuda")

    def step():
        h = implicit_filter(*args)
        return (h.detach(), *torch.autograd.grad(h, (z, *weights, *biases, freq, w_out), dout))

    assert_replays_like_eager(step, z)
