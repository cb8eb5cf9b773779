"""``zoo.kernels.linear.split.split_linear`` against ``F.linear(x, w).split(sizes, -1)``: values, contiguous parts,
both gradients, float32 and under bf16 autocast, a part left without gradient, bad sizes; ``linear_parts`` (weights
of their own, biases, a transposed weight) against one ``F.linear`` per part."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels.linear.split import linear_parts, split_linear

SIZES = [5, 12, 3]


def leaves(requires=(True, True)):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 7, 16, generator=g), torch.randn(sum(SIZES), 16, generator=g)
    return [t.requires_grad_(r) for t, r in zip((x, w), requires)]


def run(fn, bf16=False, use=(0, 1, 2), requires=(True, True)):
    """(parts, gradients of x and w) for a loss that reads the parts in ``use``."""
    x, w = leaves(requires)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        parts = fn(x, w)
    g = torch.Generator().manual_seed(1)
    loss = sum((parts[i].float() * torch.randn(parts[i].shape, generator=g)).sum() for i in use)
    loss.backward()
    return parts, x.grad, w.grad


def reference(x, w):
    return F.linear(x, w).split(SIZES, dim=-1)


def ours(x, w):
    return split_linear(x, w, SIZES)


@pytest.mark.parametrize("bf16", [False, True])
def test_parts_and_gradients_match_the_split_projection(bf16):
    (got, gx, gw), (want, wx, ww) = run(ours, bf16), run(reference, bf16)
    assert all(p.is_contiguous() and p.shape == q.shape and p.dtype == q.dtype for p, q in zip(got, want))
    # the same products for every column, but a CPU BLAS may add them in another order for another number of columns
    # (float32 parts 1 ulp apart on the CI machine): float32 to its rounding, bf16 to one rounding of its own
    for p, q in zip(got, want):
        torch.testing.assert_close(p, q, **({"rtol": 2 ** -7, "atol": 0} if bf16 else {}))
    assert gx.dtype == wx.dtype == gw.dtype == ww.dtype == torch.float32
    # under autocast each weight gradient row is one bf16 matmul either way (to one bf16 rounding), and dx adds up
    # the parts' bf16 products in bf16 (one rounding per part) where the reference rounds one product over all columns
    if bf16:
        torch.testing.assert_close(gw, ww, rtol=2 ** -7, atol=0)
        torch.testing.assert_close(gx, wx, rtol=0, atol=2 ** -6 * float(wx.abs().max()))
    else:
        torch.testing.assert_close(gw, ww)
        torch.testing.assert_close(gx, wx)


def test_an_unused_part_and_an_input_without_gradient():
    (_, gx, gw), (_, wx, ww) = run(ours, use=(1,)), run(reference, use=(1,))
    torch.testing.assert_close(gx, wx, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, ww, rtol=1e-5, atol=1e-5)
    assert not gw[:5].any() and not gw[17:].any()
    (_, gx, gw), (_, wx, _) = run(ours, requires=(True, False)), run(reference, requires=(True, False))
    assert gw is None
    torch.testing.assert_close(gx, wx, rtol=1e-5, atol=1e-5)


def test_sizes_that_do_not_cover_the_weight_are_refused():
    x, w = leaves()
    with pytest.raises(ValueError, match=r"sizes \[5, 12\] do not add up to the weight's 20 rows"):
        split_linear(x, w, [5, 12])


def parts_leaves(device="cpu"):
    """x, and (weight, bias) pairs: a biased part, a bias-free one, and a weight stored transposed as [K, n]
    (GatedFWA's temperature projection)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 5, 16, generator=g)
    w0, b0, w1, w2t = (torch.randn(*shape, generator=g) for shape in ((6, 16), (6,), (4, 16), (16, 2)))
    return [t.to(device).requires_grad_() for t in (x, w0, b0, w1, w2t)]


def parts_grads(fn, device="cpu", bf16=False):
    leaves = parts_leaves(device)
    x, w0, b0, w1, w2t = leaves
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        outs = fn(x, [w0, w1, w2t.t()], [b0, None, None])
    g = torch.Generator().manual_seed(3)
    loss = sum((o.float() * torch.randn(o.shape, generator=g).to(device)).sum() for o in outs)
    return [*outs, *torch.autograd.grad(loss, leaves)]


def per_part(x, weights, biases):
    return tuple(F.linear(x, w, b) for w, b in zip(weights, biases))


def test_linear_parts_match_one_linear_per_part_with_biases_and_a_transposed_weight():
    got, want = parts_grads(linear_parts), parts_grads(per_part)
    assert all(o.is_contiguous() for o in got[:3])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_linear_parts_refuse_a_bias_list_of_another_length():
    x, w0, b0, w1, _ = parts_leaves()
    with pytest.raises(ValueError, match="2 weights and 1 biases"):
        linear_parts(x, [w0, w1], [b0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_linear_parts_under_bf16_autocast_sum_the_input_gradient_in_float32():
    """On CUDA dx is summed in float32 inside the matmuls: closer to the float32 projection than the per-part
    reference, which rounds each part's dx to bf16 before adding."""
    got, ref = parts_grads(linear_parts, "cuda", bf16=True), parts_grads(per_part, "cuda", bf16=True)
    exact = parts_grads(per_part, "cuda")
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a.float(), b.float(), rtol=2 ** -6, atol=2 ** -6 * float(b.abs().max()))
    assert (got[3] - exact[3]).abs().max() <= (ref[3] - exact[3]).abs().max()
