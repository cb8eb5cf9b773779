"""The split-backward LayerNorm against F.layer_norm: values and all three gradients."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels.layer_norm import LayerNorm, layer_norm

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("shape", [(3, 7, 16), (200, 24)])
def test_split_backward_matches_layer_norm(shape):
    torch.manual_seed(0)
    x = (torch.randn(shape, dtype=torch.float64) * 3 + 1).requires_grad_()
    w = torch.randn(shape[-1], dtype=torch.float64, requires_grad=True)
    b = torch.randn(shape[-1], dtype=torch.float64, requires_grad=True)
    grad = torch.randn(shape, dtype=torch.float64)
    ours = layer_norm(x, w, b, 1e-5, backend="split")
    ref = F.layer_norm(x, (shape[-1],), w, b, 1e-5)
    torch.testing.assert_close(ours, ref)
    for a, r in zip(torch.autograd.grad(ours, (x, w, b), grad), torch.autograd.grad(ref, (x, w, b), grad)):
        torch.testing.assert_close(a, r)


def test_module_is_a_layer_norm_and_rejects_bad_backend():
    norm = LayerNorm(8)
    assert isinstance(norm, torch.nn.LayerNorm) and set(norm.state_dict()) == {"weight", "bias"}
    with pytest.raises(ValueError, match="backend='fused'"):
        layer_norm(torch.randn(2, 8), norm.weight, norm.bias, backend="fused")


@pytest.mark.gpu
def test_gpu_split_backward_under_autocast():
    torch.manual_seed(0)
    x = torch.randn(4096, 128, device=DEVICE, requires_grad=True)
    norm, ref = LayerNorm(128).to(DEVICE), torch.nn.LayerNorm(128).to(DEVICE)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = norm(x)
        y_ref = ref(x)
    assert y.dtype == y_ref.dtype == torch.float32
    g = torch.randn_like(y)
    ours = torch.autograd.grad(y, (x, norm.weight, norm.bias), g)
    theirs = torch.autograd.grad(y_ref, (x, ref.weight, ref.bias), g)
    for a, r in zip(ours, theirs):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-4)
