"""The loss of ``zoo.kernels.cross_entropy``: the Triton kernel (interpreted on CPU) against PyTorch's
cross-entropy, loss and logits gradient, with unlabelled rows, several class blocks, strided rows and a scaled
incoming gradient; on a GPU, bf16 logits, the recorded backend and CUDA graphs."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels import backend
from zoo.kernels.cross_entropy import cross_entropy
from graph_capture import assert_replays_like_eager


def make(R, V, labelled=0.7, dtype=torch.float32, device="cpu", seed=0):
    """Logits [R, V] (a few rows large, to test the max-shift) and targets [R] with about ``labelled`` of them set."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(R, V, generator=g) * 3
    logits[::5] *= 20
    targets = torch.randint(0, V, (R,), generator=g)
    targets[torch.rand(R, generator=g) > labelled] = -100
    return logits.to(device, dtype), targets.to(device)


def loss_and_grad(logits, targets, name, scale=1.0):
    leaf = logits.detach().clone().requires_grad_()
    loss = cross_entropy(leaf, targets, backend=name)
    assert backend.last_backend("cross_entropy") == name
    (loss * scale).backward()
    return loss, leaf.grad


@pytest.mark.parametrize("R,V", [(1, 1), (7, 5), (33, 300), (16, 4096), (9, 4097 + 64)])
def test_triton_matches_pytorch(R, V):
    logits, targets = make(R, V)
    targets[0] = 0  # at least one labelled row
    ref_loss, ref_grad = loss_and_grad(logits, targets, "naive")
    loss, grad = loss_and_grad(logits, targets, "triton")
    assert loss.dtype == torch.float32 and loss.dim() == 0
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)
    assert not grad[targets == -100].any()  # unlabelled rows get no gradient


def test_incoming_gradient_scales_and_strided_rows_are_read_in_place():
    wide, targets = make(20, 150)
    logits = wide[:, :100]  # rows with stride 150
    targets = targets.clamp(max=99)
    ref_loss, ref_grad = loss_and_grad(logits, targets, "naive", scale=-2.5)
    loss, grad = loss_and_grad(logits, targets, "triton", scale=-2.5)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)


def test_no_labelled_row_gives_nan_like_pytorch():
    logits, targets = make(6, 40)
    targets[:] = -100
    ref_loss, _ = loss_and_grad(logits, targets, "naive")
    loss, grad = loss_and_grad(logits, targets, "triton")
    assert ref_loss.isnan() and loss.isnan()
    assert not grad.any()


def test_without_gradient_the_loss_alone_is_computed():
    logits, targets = make(12, 70)
    with torch.no_grad():
        loss = cross_entropy(logits, targets, backend="triton")
    torch.testing.assert_close(loss, F.cross_entropy(logits, targets), rtol=1e-5, atol=1e-5)


def test_shapes_and_dtypes_the_kernel_cannot_take_are_value_errors():
    logits, targets = make(4, 10)
    with pytest.raises(ValueError, match=r"expected logits \[R, V\]"):
        cross_entropy(logits[None], targets, backend="triton")
    with pytest.raises(ValueError, match="not valid for backend='triton'"):
        cross_entropy(logits.double(), targets, backend="triton")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_auto_runs_triton_and_matches_pytorch(dtype):
    logits, targets = make(4096, 8192, labelled=0.9, dtype=dtype, device="cuda")
    ref_loss, ref_grad = loss_and_grad(logits, targets, "naive")
    leaf = logits.clone().requires_grad_()
    loss = cross_entropy(leaf, targets)
    assert backend.last_backend("cross_entropy") == "triton"
    loss.backward()
    assert leaf.grad.dtype == dtype
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-5)
    # the reference rounds its float32 gradient to bf16 in the cast back; here it is rounded once in the kernel
    torch.testing.assert_close(leaf.grad, ref_grad, rtol=1e-2 if dtype == torch.bfloat16 else 1e-5, atol=1e-7)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_loss_and_gradient_replay_in_a_cuda_graph():
    logits, targets = make(256, 1000, device="cuda")
    leaf = logits.requires_grad_()

    def step():
        leaf.grad = None
        loss = cross_entropy(leaf, targets)
        loss.backward()
        return loss.detach(), leaf.grad

    assert_replays_like_eager(step, leaf)
