"""The tied head and loss of ``zoo.kernels.linear_cross_entropy``: the Triton pass (interpreted on CPU) against
``F.linear`` and PyTorch's cross-entropy, the loss and the gradients of x and the weight, with unlabelled rows, a
scaled incoming gradient, rows read twice, bf16 autocast and inputs without gradient; on a GPU, the recorded backend,
the numbers of the head through ``linear`` and ``cross_entropy`` it replaces, and CUDA graphs."""
import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.cross_entropy import cross_entropy
from zoo.kernels.linear import linear
from zoo.kernels.linear_cross_entropy import fused, linear_cross_entropy
from graph_capture import assert_replays_like_eager


def make(R, D, V, labelled=0.7, device="cpu", seed=0):
    """x [R, D], weight [V, D] (logits of a few rows large, to test the max-shift), targets [R] with about
    ``labelled`` of them set and the first one always."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(R, D, generator=g)
    x[::5] *= 20
    weight = torch.randn(V, D, generator=g) / D ** 0.5
    targets = torch.randint(0, V, (R,), generator=g)
    targets[torch.rand(R, generator=g) > labelled] = -100
    targets[0] = 0
    return x.to(device), weight.to(device), targets.to(device)


def loss_and_grads(x, weight, targets, name, scale=1.0, bf16=False):
    """The loss and the gradients of x and weight through backend ``name`` ("auto" must take Triton's path)."""
    xl, wl = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        loss = linear_cross_entropy(xl, wl, targets, backend=name)
    assert backend.last_backend("linear_cross_entropy") == ("triton" if name == "auto" else name)
    (loss * scale).backward()
    return loss, xl.grad, wl.grad


def assert_matches_reference(x, weight, targets, scale=1.0):
    got, want = loss_and_grads(x, weight, targets, "triton", scale), loss_and_grads(x, weight, targets, "naive", scale)
    assert got[0].dtype == torch.float32 and got[0].dim() == 0
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("R,D,V", [(1, 1, 1), (7, 3, 5), (33, 8, 300), (16, 4, 2048)])
def test_triton_matches_the_reference(R, D, V):
    assert_matches_reference(*make(R, D, V))


def test_the_incoming_gradient_scales_both_gradients():
    assert_matches_reference(*make(20, 6, 150), scale=-2.5)


def test_rows_longer_than_one_pass_are_read_twice(monkeypatch):
    monkeypatch.setattr(fused, "ONE_PASS_MAX", 64)
    monkeypatch.setattr(fused, "MAX_BLOCK", 32)  # several blocks a row
    assert fused._launch(150)["ONE_PASS"] is False
    assert_matches_reference(*make(9, 5, 150), scale=0.5)


def test_no_labelled_row_gives_nan_and_no_gradient_like_pytorch():
    x, weight, targets = make(6, 4, 40)
    targets[:] = -100
    loss, dx, dw = loss_and_grads(x, weight, targets, "triton")
    ref_loss, *_ = loss_and_grads(x, weight, targets, "naive")
    assert ref_loss.isnan() and loss.isnan()
    assert not dx.any() and not dw.any()


def test_without_gradients_the_loss_alone_and_one_input_s_gradient():
    x, weight, targets = make(12, 5, 70)
    want, want_dx, want_dw = loss_and_grads(x, weight, targets, "naive")
    with torch.no_grad():
        torch.testing.assert_close(linear_cross_entropy(x, weight, targets, backend="triton"), want,
                                   rtol=1e-5, atol=1e-6)
    for i, wanted in ((0, want_dx), (1, want_dw)):
        leaves = [x.clone(), weight.clone()]
        leaves[i].requires_grad_()
        linear_cross_entropy(*leaves, targets, backend="triton").backward()
        torch.testing.assert_close(leaves[i].grad, wanted, rtol=1e-5, atol=1e-6)


def test_under_bf16_autocast_the_matmul_is_autocast_s_and_gradients_keep_the_inputs_dtypes():
    x, weight, targets = make(10, 8, 64)
    got = loss_and_grads(x, weight, targets, "triton", bf16=True)
    want = loss_and_grads(x, weight, targets, "naive", bf16=True)
    assert [t.dtype for t in got] == [t.dtype for t in want] == [torch.float32] * 3
    for g, w in zip(got, want):  # the same bf16 logits; G rounded to bf16 here, kept in float32 there
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-3)


def test_shapes_and_dtypes_the_kernel_cannot_take_are_value_errors():
    x, weight, targets = make(4, 3, 10)
    with pytest.raises(ValueError, match=r"expected x \[R, D\], weight \[V, D\] and targets \[R\]"):
        linear_cross_entropy(x[None], weight, targets, backend="triton")
    with pytest.raises(ValueError, match=r"expected x \[R, D\]"):
        linear_cross_entropy(x, weight[:, :2], targets, backend="triton")
    with pytest.raises(ValueError, match="not valid for backend='triton'"):
        linear_cross_entropy(x.double(), weight.double(), targets, backend="triton")


def relative_error(a, r):
    """Relative error of the whole tensor (elementwise tolerances fail on sums that are near zero)."""
    return ((a.float() - r.float()).norm() / r.float().norm()).item()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_auto_runs_triton_and_gives_the_numbers_of_linear_and_cross_entropy():
    """MQAR's figure-2 head (rows of 8192 classes): the loss and gradients of the head through ``linear``
    and ``cross_entropy`` (their log-sum-exps summed in another order, so a few entries of G round to the next bf16
    value), and of the reference in float32 within bf16's rounding."""
    x, weight, targets = make(4096, 128, 8192, labelled=0.9, device="cuda")
    x = x.bfloat16()
    got = loss_and_grads(x, weight, targets, "auto", bf16=True)
    xl, wl = x.clone().requires_grad_(), weight.clone().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = linear(xl, wl, None)
    loss = cross_entropy(logits, targets)
    assert backend.last_backend("linear") == backend.last_backend("cross_entropy") == "triton"
    loss.backward()
    assert got[1].dtype == torch.bfloat16 and got[2].dtype == torch.float32
    torch.testing.assert_close(got[0], loss, rtol=1e-5, atol=0)
    assert relative_error(got[1], xl.grad) < 2e-3 and relative_error(got[2], wl.grad) < 2e-3
    ref = loss_and_grads(x.float(), weight, targets, "naive")  # bf16 logits and G against float32: 1.5% on H100
    torch.testing.assert_close(got[0], ref[0], rtol=1e-3, atol=0)
    assert relative_error(got[1], ref[1]) < 3e-2 and relative_error(got[2], ref[2]) < 3e-2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_loss_and_gradients_replay_in_a_cuda_graph():
    x, weight, targets = make(256, 64, 1000, device="cuda")
    xl, wl = x.requires_grad_(), weight.requires_grad_()

    def step():
        xl.grad = wl.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = linear_cross_entropy(xl, wl, targets)
        loss.backward()
        return loss.detach(), xl.grad, wl.grad

    assert_replays_like_eager(step, xl)
