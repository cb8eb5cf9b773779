"""``zoo.kernels.linear.head_parts``: the Triton path (interpreted on CPU) against the reference, ``F.linear``'s
output viewed as parts and unbound: the parts (views of one output) and the gradients of x, weight and bias, for
parts' gradients in several layouts (contiguous, SDPA's transposed [B, H, L, Dh], broadcast, a part without one),
without a bias, over several programs and column blocks, under bf16 autocast; determinism, bad inputs, the recorded
backend; on a GPU, bf16 against the reference and a CUDA graph's replay."""
import pytest
import torch
import torch.nn.functional as F

import zoo.kernels.partial_sums as partial_sums
from zoo.kernels import backend
from zoo.kernels import layout
from zoo.kernels.gatedfwa import gated_window_attention
from zoo.kernels.layout import packed_base
from zoo.kernels.linear import head_parts, packed
from zoo.kernels.linear.packed import pack_grads
from graph_capture import assert_replays_like_eager


def inputs(B=2, L=37, K=12, parts=3, heads=2, head_dim=4, bias=True, device="cpu"):
    """x [B, L, K], weight [parts * heads * head_dim, K], bias (or None)."""
    g = torch.Generator().manual_seed(0)
    N = parts * heads * head_dim
    x, w = torch.randn(B, L, K, generator=g), torch.randn(N, K, generator=g) * K ** -0.5
    b = torch.randn(N, generator=g) if bias else None
    return [None if t is None else t.to(device) for t in (x, w, b)]


def part_grad(layout, B, L, heads, head_dim, seed, device="cpu"):
    """One part's output gradient [B, L, heads, head_dim] laid out as ``layout`` says."""
    g = torch.Generator().manual_seed(seed)
    if layout == "contiguous":
        t = torch.randn(B, L, heads, head_dim, generator=g)
    elif layout == "sdpa":  # a view of the contiguous [B, H, L, Dh] tensor SDPA's backward writes
        t = torch.randn(B, heads, L, head_dim, generator=g).transpose(1, 2)
    elif layout == "broadcast":  # the gradient of a sum: one value, zero strides
        t = torch.randn(1, 1, 1, head_dim, generator=g).expand(B, L, heads, head_dim)
    else:  # "rows": a zero-filled tensor with a few rows set (the last layer's queries at the labelled positions)
        t = torch.zeros(B, L, heads, head_dim)
        t[:, ::5] = torch.randn(B, t[:, ::5].shape[1], heads, head_dim, generator=g)
    return t.to(device)


def distinct_rows(B, L, K, seed=0, device="cpu"):
    """[B, K] int64: K distinct positions of each of B sequences of length L, in no order."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(L, generator=g)[:K] for _ in range(B)]).to(device)


def run(name, x, w, b, grads, parts, heads, bf16=False, rows=None):
    """(parts, gradients of x, w and b if given) through ``head_parts`` on backend ``name`` (the first part at
    ``rows`` where given), the backward seeded with ``grads`` (a None part left out of it)."""
    leaves = [t.detach().clone().requires_grad_() for t in (x, w, b) if t is not None]
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        outs = head_parts(leaves[0], leaves[1], None if b is None else leaves[2], parts, heads, rows, backend=name)
    assert backend.last_backend("head_parts") == name
    used = [(o, g.to(o.dtype)) for o, g in zip(outs, grads) if g is not None]
    torch.autograd.backward([o for o, _ in used], [g for _, g in used])
    return [o.detach() for o in outs], [t.grad for t in leaves]


def assert_matches_reference(x, w, b, grads, parts, heads, rows=None):
    (got, got_grads), (want, want_grads) = (run(name, x, w, b, grads, parts, heads, rows=rows)
                                            for name in ("triton", "naive"))
    for g, r in zip(got + got_grads, want + want_grads):
        assert g.dtype == r.dtype and g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("layouts", [("contiguous",) * 3, ("sdpa",) * 3, ("rows", "sdpa", "broadcast")])
def test_parts_and_gradients_match_the_reference(layouts, heads):
    B, L, head_dim = 2, 37, 8 // heads
    x, w, b = inputs(B, L, heads=heads, head_dim=head_dim)
    grads = [part_grad(layout, B, L, heads, head_dim, seed) for seed, layout in enumerate(layouts)]
    assert_matches_reference(x, w, b, grads, 3, heads)


def test_a_part_without_gradient_and_no_bias():
    B, L, heads, head_dim = 2, 37, 2, 4
    grads = [part_grad("sdpa", B, L, heads, head_dim, seed) for seed in range(3)]
    grads[1] = None  # the loss reads q and v alone: k's gradient is zeros, never materialised
    assert_matches_reference(*inputs(B, L), grads, 3, heads)
    assert_matches_reference(*inputs(B, L, bias=False), grads, 3, heads)
    assert_matches_reference(*inputs(B, L, parts=2), grads[::2], 2, heads)  # two parts (k, v)


@pytest.mark.parametrize("layout", ["contiguous", "sdpa"])
def test_the_first_part_at_rows_alone(layout):
    """The last block's queries: the first part [B, K, heads, Dh] at rows in no order, its gradient read where each
    row belongs (the other rows' zeros, a gradient without them in the first part's bias sums)."""
    B, L, K, heads, head_dim = 3, 37, 6, 2, 4
    rows = distinct_rows(B, L, K)
    grads = [part_grad(layout, B, K, heads, head_dim, 0)]
    grads += [part_grad("sdpa", B, L, heads, head_dim, s) for s in (1, 2)]
    x, w, b = inputs(B, L)
    q = run("triton", x, w, b, grads, 3, heads, rows=rows)[0][0]
    assert q.shape == (B, K, heads, head_dim)
    torch.testing.assert_close(q, F.linear(x, w, b)[torch.arange(B)[:, None], rows, :8].view(B, K, heads, head_dim))
    assert_matches_reference(x, w, b, grads, 3, heads, rows)
    assert_matches_reference(x, w, b, [None] + grads[1:], 3, heads, rows)  # rows given, no gradient reaches them


def test_rows_over_several_row_programs(monkeypatch):
    """12 programs over 2 x 150 rows: each run of rows maps its own rows to the first part's, from both sequences."""
    monkeypatch.setattr(partial_sums, "resident_programs", lambda device: 12)
    B, L, K = 2, 150, 40
    grads = [part_grad("sdpa", B, K, 2, 4, 0)] + [part_grad("contiguous", B, L, 2, 4, s) for s in (1, 2)]
    assert_matches_reference(*inputs(B, L), grads, 3, 2, distinct_rows(B, L, K, seed=3))


def test_gradients_already_packed_are_summed_where_they_lie():
    """Gradients that are one [B, L, 3, heads, Dh] tensor's views in order (zoo's window attention writes them so)
    are that tensor, not a copy; in another order, or one with other strides, they are packed as usual."""
    B, L, heads, head_dim = 2, 37, 2, 4
    base = torch.randn(B, L, 3, heads, head_dim)
    views = base.unbind(2)
    assert packed_base(views) is not None and packed_base((views[1], views[0], views[2])) is None
    out, sums = pack_grads(views, (B, L, heads, head_dim), base.dtype, True)
    assert out.data_ptr() == base.data_ptr() and torch.equal(out, base.view(B * L, -1))
    torch.testing.assert_close(sums, base.sum((0, 1)).flatten(), rtol=1e-5, atol=1e-5)
    for grads in ((views[1], views[0], views[2]), (views[0], views[1], views[2].contiguous())):
        out, sums = pack_grads(grads, (B, L, heads, head_dim), base.dtype, True)
        assert out.data_ptr() != base.data_ptr() and torch.equal(out, torch.stack(grads, 2).view(B * L, -1))
    x, w, b = inputs(B, L)
    assert_matches_reference(x, w, b, list(views), 3, heads)  # through autograd, against the concatenation


def test_window_attention_hands_its_gradients_over_packed(monkeypatch):
    """SWA's path: q, k, v from ``head_parts`` into zoo's window attention, whose backward writes dq, dk, dv as views
    of one tensor; autograd passes them on as they are, and the pack takes them in place. The gradients are the
    reference path's."""
    found = []

    def spy(grads):
        found.append(layout.packed_base(grads))
        return found[-1]

    monkeypatch.setattr(packed, "packed_base", spy)
    x, w, b = inputs(2, 37)
    grads = {}
    for name in ("triton", "naive"):
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        q, k, v = head_parts(*leaves, 3, 2, backend=name)
        gated_window_attention(q, k, v, None, 8, backend=name).square().sum().backward()
        grads[name] = [t.grad for t in leaves]
    assert len(found) == 1 and found[0] is not None
    for got, want in zip(grads["triton"], grads["naive"]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # float32 sums in other orders


def test_more_parts_than_a_launch_takes():
    """Five parts, one without gradient: two launches (three parts, then two) into one packed gradient."""
    grads = [part_grad(layout, 2, 37, 2, 4, seed) for seed, layout in
             enumerate(("sdpa", "contiguous", "rows", "sdpa", "contiguous"))]
    grads[3] = None
    assert_matches_reference(*inputs(parts=5), grads, 5, 2)


def test_float64_gradients_are_the_reference_s():
    """float64 is packed as it is and its bias gradient is PyTorch's float64 sum (the kernel's partial sums are
    float32)."""
    x, w, b = (t.double() for t in inputs())
    grads = [part_grad("sdpa", 2, 37, 2, 4, seed).double() for seed in range(3)]
    (got, got_grads), (want, want_grads) = (run(name, x, w, b, grads, 3, 2) for name in ("triton", "naive"))
    for g, r in zip(got + got_grads, want + want_grads):
        assert g.dtype == torch.float64
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


def test_several_row_programs_and_column_blocks(monkeypatch):
    """More programs than the interpreter's default 2 (rows split between them, the last one's run cut short: 3 x 150
    rows in runs of 256), and parts 160 columns wide (two blocks of 128, the second mostly masked, a head of 80
    across the border)."""
    monkeypatch.setattr(partial_sums, "resident_programs", lambda device: 12)  # the walk packed shares
    B, L = 3, 150
    grads = [part_grad("sdpa", B, L, 2, 4, seed) for seed in range(3)]
    assert_matches_reference(*inputs(B, L), grads, 3, 2)
    grads = [part_grad(layout, 2, 9, 2, 80, seed) for seed, layout in enumerate(("sdpa", "contiguous", "rows"))]
    assert_matches_reference(*inputs(2, 9, heads=2, head_dim=80), grads, 3, 2)


def test_inputs_without_gradient():
    x, w, b = inputs()
    wl = w.clone().requires_grad_()
    q, k, v = head_parts(x, wl, b, 3, 2, backend="triton")  # only the weight needs a gradient
    (q.square().sum() + v.sum()).backward()
    wr = w.clone().requires_grad_()
    q, k, v = head_parts(x, wr, b, 3, 2, backend="naive")
    (q.square().sum() + v.sum()).backward()
    torch.testing.assert_close(wl.grad, wr.grad, rtol=1e-5, atol=1e-5)
    bl = b.clone().requires_grad_()
    q, k, v = head_parts(x, w, bl, 3, 2, backend="triton")  # only the bias
    k.sum().backward()
    assert torch.equal(bl.grad, torch.cat([torch.zeros(8), torch.full((8,), 74.0), torch.zeros(8)]))


def test_under_bf16_autocast_dtypes_and_matmul_gradients_are_the_reference_s():
    B, L, heads, head_dim = 2, 37, 2, 4
    x, w, b = inputs(B, L)
    grads = [part_grad("sdpa", B, L, heads, head_dim, seed) for seed in range(3)]
    (got, got_grads), (want, want_grads) = (run(name, x, w, b, grads, 3, heads, bf16=True)
                                            for name in ("triton", "naive"))
    assert [t.dtype for t in got + got_grads] == [t.dtype for t in want + want_grads] == \
        [torch.bfloat16] * 3 + [torch.float32] * 3
    for g, r in zip(got + got_grads[:2], want + want_grads[:2]):  # parts, x and weight gradients: the same matmuls
        torch.testing.assert_close(g, r, rtol=0, atol=0)
    # the bias gradient is summed in float32 and rounded once; PyTorch rounds its sum to bf16 first
    torch.testing.assert_close(got_grads[2], want_grads[2], rtol=1e-2, atol=1e-2)
    exact = torch.cat([g.bfloat16().float().sum((0, 1)).flatten() for g in grads])
    torch.testing.assert_close(got_grads[2], exact, rtol=1e-5, atol=1e-4)


def test_parts_are_views_of_one_projection():
    x, w, b = inputs(heads=2, head_dim=4)
    q, k, v = head_parts(x, w, b, 3, 2, backend="triton")
    y = F.linear(x, w, b)
    assert q.shape == (2, 37, 2, 4) and q.stride() == (37 * 24, 24, 4, 1)
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    assert [t.data_ptr() - q.data_ptr() for t in (k, v)] == [8 * 4, 16 * 4]  # 8 float32 columns a part
    for got, want in zip((q, k, v), y.view(2, 37, 3, 2, 4).unbind(2)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_backward_is_deterministic():
    x, w, b = inputs()
    grads = [part_grad("sdpa", 2, 37, 2, 4, seed) for seed in range(3)]
    first, second = (run("triton", x, w, b, grads, 3, 2)[1] for _ in range(2))
    assert all(torch.equal(f, s) for f, s in zip(first, second))


def test_bad_inputs_are_value_errors():
    x, w, b = inputs()
    with pytest.raises(ValueError, match=r"x \(74, 12\) and weight \(24, 12\) are not valid: expected x \[B, L, K\]"):
        head_parts(x.flatten(0, 1), w, b, 3, 2)
    with pytest.raises(ValueError, match=r"expected x \[B, L, K\] and weight \[N, K\]"):
        head_parts(x, w[:, :5], b, 3, 2)
    with pytest.raises(ValueError, match=r"the weight's 24 rows do not split into 3 parts of 5 heads"):
        head_parts(x, w, b, 3, 5)
    with pytest.raises(ValueError, match=r"bias \(23,\) is not valid: expected \[24\]"):
        head_parts(x, w, b[:23], 3, 2)
    with pytest.raises(ValueError, match=r"rows \(3, 4\) torch.int64 are not valid: expected \[2, K\] int64"):
        head_parts(x, w, b, 3, 2, torch.zeros(3, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"rows \(2, 4\) torch.int32 are not valid"):
        head_parts(x, w, b, 3, 2, torch.zeros(2, 4, dtype=torch.int32))


def test_recorded_backend():
    x, w, b = inputs()
    for name, want in (("triton", "triton"), ("naive", "naive"), ("auto", "naive")):  # CPU tensors: "auto" is naive
        backend.clear()
        head_parts(x, w, b, 3, 2, backend=name)
        assert backend.last_backend("head_parts") == want


def gpu_case(B=64, L=256, heads=2, head_dim=64):
    """CUDA inputs and SDPA-shaped bf16 gradients at MQAR's projection size (16384 rows, D = 128)."""
    x, w, b = inputs(B, L, K=heads * head_dim, heads=heads, head_dim=head_dim, device="cuda")
    grads = [part_grad("sdpa", B, L, heads, head_dim, seed, "cuda").bfloat16() for seed in range(3)]
    return x, w, b, grads


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_auto_runs_triton_and_matches_the_reference_under_bf16_autocast():
    x, w, b, grads = gpu_case()
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outs = head_parts(*leaves, 3, 2)
    assert backend.last_backend("head_parts") == "triton"
    torch.autograd.backward(outs, grads)
    got = [*outs, *(t.grad for t in leaves)]
    want, want_grads = run("naive", x, w, b, grads, 3, 2, bf16=True)
    # the same bf16 matmuls, though cuBLAS may pick another algorithm for another operand layout
    for g, r in zip(got[:5], want + want_grads[:2]):
        assert g.dtype == r.dtype
        torch.testing.assert_close(g, r, rtol=1e-2, atol=1e-2)
    exact = torch.cat([g.float().sum((0, 1)).flatten() for g in grads])
    torch.testing.assert_close(got[5], exact, rtol=1e-5, atol=1e-2)
    again = run("triton", x, w, b, grads, 3, 2, bf16=True)[1]
    assert torch.equal(got[5], again[2])  # the bias gradient's sums: a fixed order, no atomics


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_forward_and_gradients_replay_in_a_cuda_graph():
    x, w, b, grads = gpu_case(B=4, L=64)
    leaf, weight = b.requires_grad_(), w.requires_grad_()

    def step():
        leaf.grad = weight.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            q, k, v = head_parts(x, weight, leaf, 3, 2)
        torch.autograd.backward((q, v), (grads[0], grads[2]))  # k without a gradient: zeros in the pass
        return q.detach(), leaf.grad, weight.grad

    assert_replays_like_eager(step, leaf)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_first_part_at_rows_matches_the_reference_under_bf16_autocast():
    """The last block's queries at MQAR's 16 labelled rows of 256, their gradient in SDPA's layout."""
    x, w, b, grads = gpu_case()
    rows = distinct_rows(64, 256, 16, device="cuda")
    grads[0] = part_grad("sdpa", 64, 16, 2, 64, 5, "cuda").bfloat16()
    (got, got_grads), (want, want_grads) = (run(name, x, w, b, grads, 3, 2, bf16=True, rows=rows)
                                            for name in ("triton", "naive"))
    for g, r in zip(got + got_grads[:2], want + want_grads[:2]):
        assert g.dtype == r.dtype and g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=1e-2, atol=1e-2)
    exact = torch.cat([g.float().sum((0, 1)).flatten() for g in grads])
    torch.testing.assert_close(got_grads[2], exact, rtol=1e-5, atol=1e-2)
