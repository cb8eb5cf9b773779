"""The norms of ``zoo.kernels.layer_norm``: the reference against PyTorch in float64, the Triton kernels
(interpreted on CPU) against the reference, values and every gradient, on strided views and odd widths; the
residual add fused into the norm against the add and the norm apart; on a GPU, the autocast dtypes, the recorded
backend, determinism, CUDA graphs and torch.compile."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels import backend
from zoo.kernels.embedding import embedding, embedding_dropout
from zoo.kernels.layer_norm import (MAX_N, LayerNorm, RMSNorm, add_layer_norm, embedding_layer_norm, layer_norm,
                                    rms_norm)
from zoo.kernels.rows import rows_at
from graph_capture import capture

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def head_view(B, L, H, d, part=0, parts=3, dtype=torch.float32, device="cpu"):
    """[B, L, H, d] slice ``part`` of a fused projection [B, L, parts, H, d]: strides (parts L H d, parts H d, d, 1),
    like q, k, v of a qkv projection."""
    return torch.randn(B, L, parts, H, d, dtype=dtype, device=device)[:, :, part]


def make(layout, N):
    """x of one of the layouts the kernels read in place: a q-like head view, a 2-d or a 3-d tensor."""
    if layout == "heads":
        return head_view(2, 9, 3, N)
    if layout == "2d":
        return torch.randn(200, N)  # 200 rows: several tiles per backward program
    return torch.randn(3, 5, N)


# op -> entry(x, weight, bias or gate, backend)
ENTRIES = {"layer_norm": lambda x, w, b, backend: layer_norm(x, w, b, 1e-5, backend=backend),
           "rms_norm": lambda x, w, z, backend, **kw: rms_norm(x, w, 1e-6, z, backend=backend, **kw)}


def assert_matches_reference(op, tensors, atol=1e-5, **kwargs):
    """ENTRIES[op](*tensors, **kwargs) on Triton and on the reference: values, and the gradients of every tensor
    that is not None, for the same random output gradient."""
    results = []
    for name in ("naive", "triton"):
        leaves = [None if t is None else t.detach().clone().requires_grad_() for t in tensors]
        y = ENTRIES[op](*leaves, backend=name, **kwargs)
        assert backend.last_backend(op) == name
        torch.manual_seed(1)
        grads = torch.autograd.grad(y, [t for t in leaves if t is not None], torch.randn_like(y))
        results.append((y, grads))
    (y_ref, g_ref), (y, g) = results
    assert y.dtype == y_ref.dtype and y.is_contiguous()
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=atol)
    for a, r in zip(g, g_ref):
        assert a.dtype == r.dtype
        torch.testing.assert_close(a, r, rtol=1e-5, atol=atol)


def assert_close_overall(a, r, tol):
    """Relative error of the whole tensor (elementwise tolerances fail on sums that are near zero)."""
    assert a.dtype == r.dtype
    err = ((a.float() - r.float()).norm() / r.float().norm()).item()
    assert err < tol, err


def test_reference_matches_pytorch_in_float64():
    torch.manual_seed(0)
    x, z = (torch.randn(4, 7, 24, dtype=torch.float64) * 3 + 1 for _ in range(2))
    lnorm, rnorm = torch.nn.LayerNorm(24, dtype=torch.float64), torch.nn.RMSNorm(24, dtype=torch.float64)
    for p in (*lnorm.parameters(), *rnorm.parameters()):
        torch.nn.init.normal_(p)
    ours_ln, ours_rms = LayerNorm(24, dtype=torch.float64), RMSNorm(24, dtype=torch.float64)
    ours_ln.load_state_dict(lnorm.state_dict())
    ours_rms.load_state_dict(rnorm.state_dict())
    torch.testing.assert_close(ours_ln(x), lnorm(x), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours_rms(x), rnorm(x), rtol=1e-12, atol=1e-12)  # eps None: F.rms_norm's default
    torch.testing.assert_close(ours_rms(x, z), rnorm(x) * F.silu(z), rtol=1e-12, atol=1e-12)
    assert backend.last_backend("layer_norm") == backend.last_backend("rms_norm") == "naive"


@pytest.mark.parametrize("layout, N, affine", [("heads", 24, "weight+bias"), ("heads", 40, "weight"),
                                               ("2d", 128, "weight+bias"), ("3d", 128, "none")])
def test_triton_layer_norm_matches_reference(layout, N, affine):
    torch.manual_seed(N)
    x = make(layout, N) * 3 + 1
    weight = torch.randn(N) if "weight" in affine else None
    bias = torch.randn(N) if "bias" in affine else None
    assert_matches_reference("layer_norm", [x, weight, bias])


# gate: None, "after" the norm (GatedFWA's) or "first", before it (Mamba-2's)
@pytest.mark.parametrize("layout, N, weight, gate", [("heads", 16, True, "after"), ("heads", 24, True, None),
                                                     ("heads", 40, False, "after"), ("2d", 128, True, "after"),
                                                     ("3d", 128, False, None), ("heads", 24, True, "first"),
                                                     ("2d", 100, True, "first"), ("3d", 128, False, "first")])
def test_triton_rms_norm_matches_reference(layout, N, weight, gate):
    torch.manual_seed(N)
    x = make(layout, N) * 3
    z = None
    if gate:  # a strided gate for head views too: another slice of a fused projection
        z = head_view(*x.shape, part=1, parts=2) * 2 if layout == "heads" else torch.randn_like(x) * 2
    assert_matches_reference("rms_norm", [x, torch.randn(N) if weight else None, z], gate_first=gate == "first")


def test_the_gate_first_reference_normalizes_the_gated_row():
    torch.manual_seed(0)
    x, z, w = torch.randn(3, 5, 24, dtype=torch.float64), torch.randn(3, 5, 24, dtype=torch.float64), torch.randn(24)
    want = torch.nn.functional.rms_norm(x * F.silu(z), (24,), w.double(), 1e-6)
    torch.testing.assert_close(rms_norm(x, w, 1e-6, z, gate_first=True, backend="naive"), want)
    assert not torch.allclose(rms_norm(x, w, 1e-6, z, backend="naive"), want)


def test_triton_copies_a_strided_last_dim_and_takes_any_output_gradient():
    """x with a strided last dim (copied); the gradient of y.sum(), which arrives expanded (all strides 0); a gate
    that needs no gradient."""
    torch.manual_seed(0)
    x = torch.randn(24, 30).t().requires_grad_()
    w = torch.randn(24, requires_grad=True)
    z = torch.randn(30, 24)
    for op, arg in (("layer_norm", w), ("rms_norm", z)):
        got = torch.autograd.grad(ENTRIES[op](x, w, arg, backend="triton").sum(), (x, w))
        want = torch.autograd.grad(ENTRIES[op](x, w, arg, backend="naive").sum(), (x, w))
        for a, r in zip(got, want):
            torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-5)


def test_rms_norm_dtypes_follow_nn_rms_norm():
    """x's dtype whatever the weight's, promoted with the gate's, as nn.RMSNorm(x) * silu(gate) gives, on both
    backends; ``out_dtype`` overrides it."""
    x = head_view(2, 3, 2, 16, dtype=torch.bfloat16)
    z = torch.randn(2, 3, 2, 16)
    norm = torch.nn.RMSNorm(16)
    for name in ("naive", "triton"):
        assert rms_norm(x, norm.weight, backend=name).dtype == norm(x).dtype == torch.bfloat16
        assert rms_norm(x, backend=name).dtype == F.rms_norm(x, (16,)).dtype == torch.bfloat16
        assert rms_norm(x, norm.weight, gate=z, backend=name).dtype == (norm(x) * F.silu(z)).dtype == torch.float32
        assert rms_norm(x, norm.weight, gate=z, out_dtype=torch.bfloat16, backend=name).dtype == torch.bfloat16


def test_modules_keep_pytorch_parameters_and_reject_bad_arguments():
    norm = LayerNorm(8)
    assert isinstance(norm, torch.nn.LayerNorm) and set(norm.state_dict()) == {"weight", "bias"}
    rnorm = RMSNorm(8, eps=1e-6)
    assert isinstance(rnorm, torch.nn.RMSNorm) and set(rnorm.state_dict()) == {"weight"}
    rnorm.load_state_dict(torch.nn.RMSNorm(8).state_dict())
    assert not list(RMSNorm(8, elementwise_affine=False).parameters())
    with pytest.raises(ValueError, match="normalized_shape"):
        RMSNorm((2, 8))
    with pytest.raises(ValueError, match="backend='fused'"):
        layer_norm(torch.randn(2, 8), norm.weight, norm.bias, backend="fused")
    with pytest.raises(ValueError, match="gate.shape"):
        rms_norm(torch.randn(2, 8), gate=torch.randn(8))
    for x in (torch.randn(2, 8, dtype=torch.float64), torch.randn(1, MAX_N + 1)):
        with pytest.raises(ValueError, match="backend='triton'"):
            rms_norm(x, backend="triton")


def add_then_norm(x, update, weight, bias, backend):
    """The add and the norm apart, as a block computed them before they were fused: (x + update, its norm)."""
    total = x + update
    return total, layer_norm(total, weight, bias, 1e-5, backend=backend)


def outputs_and_grads(fn, tensors, name, bf16):
    """(the sum, the norm) of ``fn(*leaves)`` on norm backend ``name`` and the gradients of the leaves (copies of
    ``tensors``; a None stays None and has none) for one seeded random gradient reaching each output."""
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in tensors]
    with torch.autocast(tensors[-1].device.type, dtype=torch.bfloat16, enabled=bf16):
        total, y = fn(*leaves)
    assert backend.last_backend("layer_norm") == name
    torch.manual_seed(1)
    grads = torch.autograd.grad((total, y), [t for t in leaves if t is not None],
                                (torch.randn_like(total), torch.randn_like(y)))
    return total, y, *grads


def fused_and_apart(backend_name, x, update, weight, bias, bf16=False):
    """Outputs (the sum, the norm) and the gradients of x, update, weight, bias, both for ``add_layer_norm`` and for
    :func:`add_then_norm`, the same random gradient reaching the sum (its later uses) and the norm."""
    return [outputs_and_grads(lambda *leaves: fn(*leaves, backend=backend_name), (x, update, weight, bias),
                              backend_name, bf16) for fn in (add_layer_norm, add_then_norm)]


@pytest.mark.parametrize("name", ["naive", "triton"])
@pytest.mark.parametrize("shape", [(3, 50, 24), (200, 40)])
def test_add_layer_norm_is_the_add_and_the_norm_in_float32(name, shape):
    """The fused add gives the numbers of the add and the norm apart, both ways, bit for bit in float32: the sum,
    its norm, and the gradient of x (the norm's and the sum's own, added), of update, of weight and bias."""
    torch.manual_seed(0)
    x, update = torch.randn(*shape), torch.randn(*shape)
    weight, bias = torch.randn(shape[-1]), torch.randn(shape[-1])
    fused, apart = fused_and_apart(name, x, update, weight, bias)
    for a, r in zip(fused, apart):
        assert a.dtype == r.dtype
        torch.testing.assert_close(a, r, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["naive", "triton"])
def test_add_layer_norm_under_autocast_keeps_the_dtypes_of_a_bf16_update(name):
    """A float32 stream plus a bf16 mixer output under bf16 autocast: the sum in float32, the norm in float32 (as
    ``F.layer_norm`` under autocast), the update's gradient in bf16. The Triton interpreter rounds float32 to bf16
    toward zero where PyTorch (and Triton on a GPU) round to nearest, so on CPU the bf16 gradient is within a bf16
    step of the reference; everything in float32 is bit for bit."""
    torch.manual_seed(0)
    x, update = torch.randn(4, 30, 32), torch.randn(4, 30, 32).bfloat16()
    weight, bias = torch.randn(32), torch.randn(32)
    fused, apart = fused_and_apart(name, x, update, weight, bias, bf16=True)
    assert [t.dtype for t in fused] == [torch.float32] * 3 + [torch.bfloat16] + [torch.float32] * 2
    for a, r in zip(fused, apart):
        assert a.dtype == r.dtype
        exact = name == "naive" or a.dtype == torch.float32
        torch.testing.assert_close(a, r, rtol=0 if exact else 8e-3, atol=0 if exact else 1e-6)


def test_add_layer_norm_reads_a_strided_update_and_passes_a_gradient_of_the_sum_alone():
    torch.manual_seed(0)
    x, wide = torch.randn(3, 10, 16), torch.randn(3, 10, 48)
    update = wide[..., 16:32]  # a view with row stride 48
    weight, bias = torch.randn(16), torch.randn(16)
    fused, apart = fused_and_apart("triton", x, update, weight, bias)
    for a, r in zip(fused, apart):
        torch.testing.assert_close(a, r, rtol=0, atol=0)
    leaves = [t.clone().requires_grad_() for t in (x, update)]
    total, _ = add_layer_norm(*leaves, weight, bias, backend="triton")
    grads = torch.autograd.grad(total.sum(), leaves)  # the norm unused: only the sum's gradient flows
    assert all(torch.equal(g, torch.ones_like(g)) for g in grads)
    with pytest.raises(ValueError, match=r"update.shape=\(3, 10, 48\) is not valid"):
        add_layer_norm(x, wide, weight, bias)
    with pytest.raises(ValueError, match=r"update.shape=\(5, 10, 16\) is not valid: .* or its trailing dims"):
        add_layer_norm(x, torch.randn(5, 10, 16), weight, bias)


@pytest.mark.parametrize("name", ["naive", "triton"])
@pytest.mark.parametrize("update_shape", [(10, 16), (16,)])
def test_add_layer_norm_broadcasts_an_update_of_trailing_dims_and_sums_its_gradient(name, update_shape):
    """Learned positions [L, N] (or a vector [N]) added to every sequence of x [B, L, N]: the sum, the norm and the
    gradients of x, weight and bias bit for bit as the broadcast add and the norm apart; the update's gradient, a
    column sum of x's on the Triton path, in another order than autograd's sum; also when only the sum is used."""
    torch.manual_seed(0)
    x, update = torch.randn(3, 10, 16), torch.randn(*update_shape)
    weight, bias = torch.randn(16), torch.randn(16)
    fused, apart = fused_and_apart(name, x, update, weight, bias)
    for i, (a, r) in enumerate(zip(fused, apart)):
        assert a.shape == r.shape and a.dtype == r.dtype
        torch.testing.assert_close(a, r, rtol=1e-6 if i == 3 else 0, atol=1e-6 if i == 3 else 0)
    leaf = update.clone().requires_grad_()
    total, _ = add_layer_norm(x, leaf, weight, bias, backend=name)
    (grad,) = torch.autograd.grad(total.sum(), leaf)
    torch.testing.assert_close(grad, torch.full(update_shape, x.numel() / update.numel()), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["naive", "triton"])
@pytest.mark.parametrize("update_shape", [(3, 10, 16), (10, 16)])
def test_add_layer_norm_returns_the_sum_at_rows_and_adds_their_gradient_where_they_belong(name, update_shape):
    """``rows``: the sum at K distinct rows of each sequence, [B, K, N], bit for bit as the add, the norm and
    ``rows_at`` apart, and so is every gradient (x's: the norm's plus the rows' own, added in the backward pass);
    also when only the rows are used."""
    torch.manual_seed(0)
    x, update = torch.randn(3, 10, 16), torch.randn(*update_shape)
    weight, bias = torch.randn(16), torch.randn(16)
    rows = torch.tensor([[9, 0, 4, 5], [1, 2, 3, 7], [8, 6, 0, 2]])
    results = []
    for fused in (True, False):
        leaves = [t.detach().clone().requires_grad_() for t in (x, update, weight, bias)]
        if fused:
            picked, y = add_layer_norm(*leaves, backend=name, rows=rows)
        else:
            total, y = add_then_norm(*leaves, backend=name)
            picked = rows_at(total, rows)
        assert backend.last_backend("layer_norm") == name and picked.shape == (3, 4, 16)
        torch.manual_seed(1)
        grads = torch.autograd.grad((picked, y), leaves, (torch.randn_like(picked), torch.randn_like(y)))
        only = torch.autograd.grad(add_layer_norm(*leaves, backend=name, rows=rows)[0].sum() if fused else
                                   rows_at(add_then_norm(*leaves, backend=name)[0], rows).sum(), leaves[:2])
        results.append((picked, y, *grads, *only))
    for i, (a, r) in enumerate(zip(*results)):
        broadcast_sum = update_shape == (10, 16) and i in (3, 7)  # the update's gradient summed over sequences
        torch.testing.assert_close(a, r, rtol=1e-6 if broadcast_sum else 0, atol=1e-6 if broadcast_sum else 0)
    with pytest.raises(ValueError, match=r"rows.shape=\(4,\) is not valid: expected \[B, K\] rows"):
        add_layer_norm(x, update, weight, bias, rows=rows[0])


def pre_normed_and_apart(name, x, update, weight, bias, pre_weight, pre_bias, rows=None, bf16=False):
    """Outputs (the stream s = s1 + pre(s1), s1 = x + update, or its rows; the norm of s) and the gradients of every
    leaf, for ``add_layer_norm(..., pre=...)`` and for the two ``add_layer_norm`` apart, on backend ``name``; and how
    many norm ops the first one ran."""
    from zoo.kernels.layer_norm import fused
    calls = []
    apply = fused._Norm.apply

    def counting(*args):
        calls.append(args)
        return apply(*args)

    def pre_normed(x_, update_, weight_, bias_, pre_weight_, pre_bias_):
        fused._Norm.apply = counting
        try:
            return add_layer_norm(x_, update_, weight_, bias_, backend=name, rows=rows,
                                  pre=(pre_weight_, pre_bias_, 1e-5))
        finally:
            fused._Norm.apply = apply

    def apart(x_, update_, weight_, bias_, pre_weight_, pre_bias_):
        s1, h = add_layer_norm(x_, update_, pre_weight_, pre_bias_, backend=name)
        return add_layer_norm(s1, h, weight_, bias_, backend=name, rows=rows)

    tensors = (x, update, weight, bias, pre_weight, pre_bias)
    return [outputs_and_grads(fn, tensors, name, bf16) for fn in (pre_normed, apart)], len(calls)


@pytest.mark.parametrize("name", ["naive", "triton"])
@pytest.mark.parametrize("shape, picked", [((3, 50, 24), False), ((3, 50, 24), True), ((200, 40), False)])
def test_add_layer_norm_with_a_pre_norm_is_the_two_norms_apart(name, shape, picked):
    """Zoology's normed block and the next norm in one op: the stream, its norm and the gradients of x, update and
    both norms' weights and biases as the two fused adds and norms apart, bit for bit in float32; one kernel each way
    on the Triton path."""
    torch.manual_seed(0)
    x, update = torch.randn(*shape), torch.randn(*shape)
    weight, bias, pre_weight, pre_bias = (torch.randn(shape[-1]) for _ in range(4))
    rows = torch.rand(3, 50).argsort(1)[:, :5] if picked else None
    (pre_normed, apart), calls = pre_normed_and_apart(name, x, update, weight, bias, pre_weight, pre_bias, rows)
    assert calls == (1 if name == "triton" else 0)
    for a, r in zip(pre_normed, apart):
        assert a.shape == r.shape and a.dtype == r.dtype
        torch.testing.assert_close(a, r, rtol=0, atol=0)


def test_add_layer_norm_with_a_pre_norm_under_autocast():
    """A float32 stream plus a bf16 update under bf16 autocast: one Triton op (the pre norm's output is float32, as
    the stream); a bf16 stream under autocast (the pre norm's output float32, not the stream's dtype): the two ops
    apart. The numbers of the ops apart either way."""
    torch.manual_seed(0)
    weight, bias, pre_weight, pre_bias = (torch.randn(32) for _ in range(4))
    for x, update, want_calls in ((torch.randn(4, 9, 32), torch.randn(4, 9, 32).bfloat16(), 1),
                                  (torch.randn(4, 9, 32).bfloat16(), torch.randn(4, 9, 32).bfloat16(), 2)):
        (pre_normed, apart), calls = pre_normed_and_apart("triton", x, update, weight, bias, pre_weight, pre_bias,
                                                          bf16=True)
        assert calls == want_calls
        for a, r in zip(pre_normed, apart):
            assert a.dtype == r.dtype
            assert_close_overall(a, r, 1e-6 if a.dtype == torch.float32 else 1e-2)


def gathered_and_apart(name, ids, table, update, weight, bias, rows=None, bf16=False):
    """Outputs (the stream, or its rows, and the norm) and the gradients of table, update (if any), weight and bias,
    both for ``embedding_layer_norm`` on backend ``name`` and for the embedding then ``add_layer_norm`` (or
    ``layer_norm``) on that backend, the same random gradients reaching the stream and the norm."""
    def gathered(*leaves):
        return embedding_layer_norm(ids, *leaves, backend=name, rows=rows)

    def apart(table_, update_, weight_, bias_):
        x = embedding(ids, table_, backend="naive")
        if update_ is None:
            total, y = x, layer_norm(x, weight_, bias_, backend=name)
        else:
            total, y = add_layer_norm(x, update_, weight_, bias_, backend=name)
        return (total if rows is None else rows_at(total, rows)), y

    return [outputs_and_grads(fn, (table, update, weight, bias), name, bf16) for fn in (gathered, apart)]


@pytest.mark.parametrize("name", ["naive", "triton"])
@pytest.mark.parametrize("update_shape", [None, (10, 16), (3, 10, 16)])
@pytest.mark.parametrize("picked", [False, True])
def test_embedding_layer_norm_is_the_embedding_then_the_norm(name, update_shape, picked):
    """The rows gathered by the norm: the stream (or its rows), the norm and the gradients of every leaf as the
    embedding and the norm apart, ids repeated (the table's gradient sums their rows, by the embedding's own sum
    on both sides, so bit for bit), with learned positions, a full update or none."""
    torch.manual_seed(0)
    ids = torch.randint(0, 7, (3, 10))
    table, weight, bias = torch.randn(7, 16), torch.randn(16), torch.randn(16)
    update = None if update_shape is None else torch.randn(*update_shape)
    rows = torch.tensor([[9, 0, 4, 5], [1, 2, 3, 7], [8, 6, 0, 2]]) if picked else None
    gathered, apart = gathered_and_apart(name, ids, table, update, weight, bias, rows)
    for i, (a, r) in enumerate(zip(gathered, apart)):
        assert a.shape == r.shape and a.dtype == r.dtype
        broadcast_sum = update_shape == (10, 16) and i == 3  # the positions' gradient summed over sequences
        torch.testing.assert_close(a, r, rtol=1e-6 if broadcast_sum else 0, atol=1e-6 if broadcast_sum else 0)


def test_embedding_layer_norm_under_autocast_and_bad_shapes():
    """bf16 autocast: the stream in float32, the norm in float32 (``to_matmul``: bf16), the table's gradient float32;
    the shapes checked before anything runs."""
    torch.manual_seed(0)
    ids, table, positions = torch.randint(0, 9, (2, 12)), torch.randn(9, 32), torch.randn(12, 32)
    weight, bias = torch.randn(32), torch.randn(32)
    gathered, apart = gathered_and_apart("triton", ids, table, positions, weight, bias, bf16=True)
    assert [t.dtype for t in gathered] == [torch.float32] * 6
    for a, r in zip(gathered, apart):
        torch.testing.assert_close(a, r, rtol=1e-6, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert embedding_layer_norm(ids, table, positions, weight, bias, to_matmul=True)[1].dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"table \(9, 32\) and update \(11, 32\) are not valid for ids \(2, 12\)"):
        embedding_layer_norm(ids, table, positions[:11], weight, bias)
    with pytest.raises(ValueError, match=r"table \(288,\) and update None are not valid"):
        embedding_layer_norm(ids, table.flatten(), None, weight, bias)
    with pytest.raises(ValueError, match=r"rows.shape=\(4,\) is not valid: expected \[B, K\] rows of ids"):
        embedding_layer_norm(ids, table, positions, weight, bias, backend="triton", rows=torch.arange(4))


def dropped_and_apart(name, ids, table, positions, weight, bias, rows=None, bf16=False, p=0.25):
    """``gathered_and_apart`` with embedding dropout: ``embedding_layer_norm(..., dropout=p)`` against the embedding
    dropout op then the norm, both on backend ``name`` and from the same seed (so the same mask)."""
    def dropped(*leaves):
        torch.manual_seed(5)
        return embedding_layer_norm(ids, *leaves, backend=name, rows=rows, dropout=p)

    def apart(table_, positions_, weight_, bias_):
        torch.manual_seed(5)
        x = embedding_dropout(ids, table_, positions_, p, backend=name)
        return (x if rows is None else rows_at(x, rows)), layer_norm(x, weight_, bias_, backend=name)

    return [outputs_and_grads(fn, (table, positions, weight, bias), name, bf16) for fn in (dropped, apart)]


@pytest.mark.parametrize("name", ["naive", "triton"])
@pytest.mark.parametrize("with_positions", [False, True])
@pytest.mark.parametrize("picked", [False, True])
def test_embedding_layer_norm_with_dropout_is_the_embedding_dropout_then_the_norm(name, with_positions, picked):
    """Embedding dropout inside the gathering norm: the stream (or its rows), the norm and every gradient as the
    embedding dropout op and the norm apart with the same seed, bit for bit (the same mask, drawn again backward);
    about p of the stream dropped; the dropout op's backend recorded."""
    torch.manual_seed(0)
    ids = torch.randint(0, 7, (3, 40))
    table, weight, bias = torch.randn(7, 16), torch.randn(16), torch.randn(16)
    positions = torch.randn(40, 16) if with_positions else None
    rows = torch.rand(3, 40).argsort(1)[:, :6] if picked else None
    dropped, apart = dropped_and_apart(name, ids, table, positions, weight, bias, rows)
    assert backend.last_backend("embedding_dropout") == name
    for i, (a, r) in enumerate(zip(dropped, apart)):
        assert a.shape == r.shape and a.dtype == r.dtype
        broadcast_sum = with_positions and i == 3  # the positions' gradient summed over sequences
        torch.testing.assert_close(a, r, rtol=1e-6 if broadcast_sum else 0, atol=1e-6 if broadcast_sum else 0)
    torch.manual_seed(5)
    total = embedding_layer_norm(ids, table, positions, weight, bias, backend=name, dropout=0.25)[0]
    assert 0.15 < (total == 0).float().mean().item() < 0.35
    kept = embedding_layer_norm(ids, table, positions, weight, bias, backend=name, dropout=0.0)[0]
    torch.testing.assert_close(total, torch.where(total == 0, 0.0, kept / 0.75), rtol=1e-6, atol=0)


def test_embedding_layer_norm_with_dropout_draws_a_new_mask_each_call_and_checks_its_arguments():
    torch.manual_seed(0)
    ids, table, positions = torch.randint(0, 9, (2, 12)), torch.randn(9, 32), torch.randn(12, 32)
    weight, bias = torch.randn(32), torch.randn(32)
    first, second = (embedding_layer_norm(ids, table, positions, weight, bias, backend="triton", dropout=0.5)[0]
                     for _ in range(2))
    assert not torch.equal(first == 0, second == 0)
    with pytest.raises(ValueError, match=r"dropout=1.0 is not valid: expected a probability in \[0, 1\)"):
        embedding_layer_norm(ids, table, positions, weight, bias, dropout=1.0)
    with pytest.raises(ValueError, match=r"ids \(24,\) and update None are not valid with dropout"):
        embedding_layer_norm(ids.flatten(), table, None, weight, bias, dropout=0.1)
    with pytest.raises(ValueError, match=r"update \(2, 12, 32\) are not valid with dropout"):
        embedding_layer_norm(ids, table, torch.randn(2, 12, 32), weight, bias, dropout=0.1)


def gpu_inputs(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE, dtype=dtype, requires_grad=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_layer_norm_under_autocast(dtype):
    """MQAR's residual stream: float32 out under autocast as nn.LayerNorm, gradients in the inputs' dtypes."""
    torch.manual_seed(0)
    x = gpu_inputs(65536, 128, dtype=dtype)
    norm, ref = LayerNorm(128).to(DEVICE), torch.nn.LayerNorm(128).to(DEVICE)
    with torch.no_grad():
        for p, q in zip(norm.parameters(), ref.parameters()):
            p.normal_()
            q.copy_(p)
    backend.clear()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y, y_ref = norm(x), ref(x)
    assert backend.last_backend("layer_norm") == "triton"
    assert y.dtype == y_ref.dtype == torch.float32
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
    g = torch.randn_like(y)
    ours = torch.autograd.grad(y, (x, norm.weight, norm.bias), g)
    theirs = torch.autograd.grad(y_ref, (x, ref.weight, ref.bias), g)
    for a, r in zip(ours, theirs):
        assert_close_overall(a, r, 1e-5 if dtype == torch.float32 else 1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("gain", [True, False])
def test_gpu_qk_norm_on_strided_bf16_heads_under_autocast(gain):
    """GatedFWA's QK-norm: q a bf16 view of a qkv projection, gains in float32; bf16 out as nn.RMSNorm."""
    torch.manual_seed(0)
    qkv = torch.randn(4, 512, 3, 4, 32, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    q = qkv[:, :, 0]
    norm, ref = (cls(32, elementwise_affine=gain).to(DEVICE) for cls in (RMSNorm, torch.nn.RMSNorm))
    if gain:
        with torch.no_grad():
            norm.weight.uniform_(0.5, 2)
            ref.weight.copy_(norm.weight)
    backend.clear()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y, y_ref = norm(q), ref(q)
    assert backend.last_backend("rms_norm") == "triton"
    assert y.dtype == y_ref.dtype == torch.bfloat16
    assert_close_overall(y, y_ref, 1e-3)
    g = torch.randn_like(y)
    ours = torch.autograd.grad(y, (qkv, *norm.parameters()), g)
    theirs = torch.autograd.grad(y_ref, (qkv, *ref.parameters()), g)
    for a, r in zip(ours, theirs):
        assert_close_overall(a, r, 1e-2)


@pytest.mark.gpu
def test_gpu_gated_output_norm_matches_its_float32_formula():
    """GatedFWA's output gate RMSNorm(o) * silu(z), bf16 o and z under autocast, against the float32 formula."""
    torch.manual_seed(0)
    o, z = gpu_inputs(8, 256, 4, 32, dtype=torch.bfloat16), gpu_inputs(8, 256, 4, 32, dtype=torch.bfloat16)
    norm = RMSNorm(32, eps=1e-6).to(DEVICE)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = norm(o, z)
    assert backend.last_backend("rms_norm") == "triton" and y.dtype == torch.bfloat16
    ref = F.rms_norm(o.float(), (32,), norm.weight, 1e-6) * F.silu(z.float())
    assert_close_overall(y, ref.bfloat16(), 1e-3)
    g = torch.randn_like(y)
    ours = torch.autograd.grad(y, (o, z, norm.weight), g)
    for a, r in zip(ours, torch.autograd.grad(ref, (o, z, norm.weight), g.float())):
        assert_close_overall(a, r, 1e-2)


@pytest.mark.gpu
def test_gpu_backward_is_deterministic():
    torch.manual_seed(0)
    x = gpu_inputs(65536, 128)
    norm = LayerNorm(128).to(DEVICE)
    g = torch.randn_like(x)
    first = torch.autograd.grad(norm(x), (x, norm.weight, norm.bias), g)
    second = torch.autograd.grad(norm(x), (x, norm.weight, norm.bias), g)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_gpu_forward_and_backward_replay_in_a_cuda_graph():
    torch.manual_seed(0)
    x, z = gpu_inputs(4096, 64), torch.randn(4096, 64, device=DEVICE)
    lnorm, rnorm = LayerNorm(64).to(DEVICE), RMSNorm(64).to(DEVICE)

    def step():
        y = rnorm(lnorm(x), z)
        return (y, *torch.autograd.grad(y.square().sum(), (x, lnorm.weight, lnorm.bias, rnorm.weight)))

    graph, captured = capture(step, warmups=3)
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
    graph.replay()
    for a, b in zip(captured, step()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_runs_inside_torch_compile():
    torch.manual_seed(0)
    x, z = gpu_inputs(1024, 64), torch.randn(1024, 64, device=DEVICE)
    lnorm, rnorm = LayerNorm(64).to(DEVICE), RMSNorm(64).to(DEVICE)

    def f(x):
        return rnorm(lnorm(x) * 2, z).square().sum()

    want = torch.autograd.grad(f(x), x)[0]
    backend.clear()
    got = torch.autograd.grad(torch.compile(f)(x), x)[0]
    assert backend.last_backend("layer_norm") == backend.last_backend("rms_norm") == "triton"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def assert_add_norm_replays_in_a_graph(x, update, weight, bias, rows=None):
    """``add_layer_norm`` (at ``rows``, if given) forward and backward under bf16 autocast, captured in a CUDA graph:
    replayed on a new x, it gives an eager call's numbers bit for bit."""
    leaves = [t.clone().requires_grad_() for t in (x, update, weight, bias)]

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            total, y = add_layer_norm(*leaves, rows=rows)
        return (y, *torch.autograd.grad((total.square().sum() + y.square().sum()), leaves))

    graph, captured = capture(step, warmups=3)
    with torch.no_grad():
        leaves[0].copy_(torch.randn_like(leaves[0]))
    graph.replay()
    for a, b in zip(captured, step()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_add_layer_norm_adds_learned_positions_to_every_sequence():
    """MQAR's first norm: the float32 stream [256, 256, 128] plus positions [256, 128] under bf16 autocast, against
    the broadcast add and the norm apart (the positions' gradient summed over 256 sequences, in another order)."""
    torch.manual_seed(0)
    x, positions = torch.randn(256, 256, 128, device=DEVICE), torch.randn(256, 128, device=DEVICE)
    weight, bias = torch.randn(128, device=DEVICE), torch.randn(128, device=DEVICE)
    fused, apart = fused_and_apart("triton", x, positions, weight, bias, bf16=True)
    for a, r in zip(fused, apart):
        assert a.shape == r.shape and a.dtype == r.dtype
        assert_close_overall(a, r, 1e-6)


@pytest.mark.gpu
def test_gpu_add_layer_norm_at_the_labelled_rows_adds_their_gradient_where_they_belong():
    """MQAR's last block: the stream [256, 256, 128] plus a bf16 mixer output, picked at 16 distinct rows of each
    sequence by the norm, against the add, the norm and ``rows_at`` apart, under bf16 autocast, and in a CUDA graph."""
    torch.manual_seed(0)
    x, update = torch.randn(256, 256, 128, device=DEVICE), torch.randn(256, 256, 128, device=DEVICE).bfloat16()
    weight, bias = torch.randn(128, device=DEVICE), torch.randn(128, device=DEVICE)
    rows = torch.rand(256, 256, device=DEVICE).argsort(1)[:, :16]
    results = []
    for fused in (True, False):
        leaves = [t.detach().clone().requires_grad_() for t in (x, update, weight, bias)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if fused:
                picked, y = add_layer_norm(*leaves, rows=rows)
            else:
                total, y = add_then_norm(*leaves, backend="triton")
                picked = rows_at(total, rows)
        torch.manual_seed(1)
        grads = torch.autograd.grad((picked, y), leaves, (torch.randn_like(picked), torch.randn_like(y)))
        results.append((picked, y, *grads))
    for a, r in zip(*results):
        assert a.dtype == r.dtype
        assert_close_overall(a, r, 1e-6 if a.dtype == torch.float32 else 1e-3)
    assert_add_norm_replays_in_a_graph(x, update, weight, bias, rows=rows)


@pytest.mark.gpu
@pytest.mark.parametrize("picked", [False, True])
def test_gpu_embedding_layer_norm_matches_the_embedding_then_the_norm(picked):
    """MQAR's first norm at the figure-2 cell: ids [256, 256] into an [8192, 128] table, learned positions, bf16
    autocast, the Triton path recorded, against the embedding (PyTorch's gather) and the fused add and norm apart;
    and in a CUDA graph, bit for bit with an eager call on new ids."""
    torch.manual_seed(0)
    ids = torch.randint(0, 8192, (256, 256), device=DEVICE)
    table, positions = torch.randn(8192, 128, device=DEVICE), torch.randn(256, 128, device=DEVICE)
    weight, bias = torch.randn(128, device=DEVICE), torch.randn(128, device=DEVICE)
    rows = torch.rand(256, 256, device=DEVICE).argsort(1)[:, :16] if picked else None
    gathered, apart = gathered_and_apart("triton", ids, table, positions, weight, bias, rows, bf16=True)
    for a, r in zip(gathered, apart):
        assert a.shape == r.shape and a.dtype == r.dtype
        assert_close_overall(a, r, 1e-6)
    leaves = [t.clone().requires_grad_() for t in (table, positions, weight, bias)]
    fresh = ids.clone()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            total, y = embedding_layer_norm(fresh, *leaves, rows=rows)
        return (y, *torch.autograd.grad((total.square().sum() + y.square().sum()), leaves))

    graph, captured = capture(step, warmups=3)
    fresh.copy_(torch.randint_like(ids, 0, 8192))
    graph.replay()
    for a, b in zip(captured, step()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_embedding_layer_norm_with_dropout_matches_the_dropout_op_then_the_norm():
    """Zoology's first norm at the figure-2 cell (embedding dropout 0.1, learned positions, bf16 autocast): the
    Triton path recorded, the numbers of the embedding dropout op and the norm apart from the same seed, and a new
    mask at each replay of a CUDA graph."""
    torch.manual_seed(0)
    ids = torch.randint(0, 8192, (256, 256), device=DEVICE)
    table, positions = torch.randn(8192, 128, device=DEVICE), torch.randn(256, 128, device=DEVICE)
    weight, bias = torch.randn(128, device=DEVICE), torch.randn(128, device=DEVICE)
    dropped, apart = dropped_and_apart("triton", ids, table, positions, weight, bias, bf16=True, p=0.1)
    assert backend.last_backend("embedding_dropout") == "triton"
    for a, r in zip(dropped, apart):
        assert a.shape == r.shape and a.dtype == r.dtype
        assert_close_overall(a, r, 1e-6)
    assert 0.09 < (dropped[0] == 0).float().mean().item() < 0.11

    def stream():
        return embedding_layer_norm(ids, table, positions, weight, bias, dropout=0.1)[0]

    graph, captured = capture(stream, warmups=2)
    graph.replay()
    first = captured.clone()
    graph.replay()
    assert 0.09 < (first == 0).float().mean().item() < 0.11 and not torch.equal(first == 0, captured == 0)


@pytest.mark.gpu
@pytest.mark.parametrize("picked", [False, True])
def test_gpu_add_layer_norm_with_a_pre_norm_matches_the_two_norms_apart(picked):
    """Zoology's normed block at MQAR's figure-2 cell (a float32 stream plus a bf16 mixer output, bf16 autocast, the
    last block's labelled rows or none): one Triton op with the two norms' numbers apart (up to the multiply-adds the
    compiler may fuse), and a CUDA graph replays it on new inputs bit for bit as an eager call."""
    torch.manual_seed(0)
    x, update = torch.randn(256, 256, 128, device=DEVICE), torch.randn(256, 256, 128, device=DEVICE).bfloat16()
    weight, bias, pre_weight, pre_bias = (torch.randn(128, device=DEVICE) for _ in range(4))
    rows = torch.rand(256, 256, device=DEVICE).argsort(1)[:, :16] if picked else None
    (pre_normed, apart), calls = pre_normed_and_apart("triton", x, update, weight, bias, pre_weight, pre_bias, rows,
                                                      bf16=True)
    assert calls == 1
    for a, r in zip(pre_normed, apart):
        assert a.shape == r.shape and a.dtype == r.dtype
        assert_close_overall(a, r, 1e-6 if a.dtype == torch.float32 else 1e-3)
    leaves = [t.clone().requires_grad_() for t in (x, update, weight, bias, pre_weight, pre_bias)]

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            total, y = add_layer_norm(*leaves[:4], rows=rows, pre=(leaves[4], leaves[5], 1e-5))
        return (total, y, *torch.autograd.grad(total.square().sum() + y.float().square().sum(), leaves))

    graph, captured = capture(step, warmups=2)
    with torch.no_grad():
        leaves[0].copy_(torch.randn_like(x))
    graph.replay()
    for a, b in zip(captured, step()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_add_layer_norm_matches_the_add_and_the_norm_under_autocast():
    """MQAR's residual stream (float32) plus a bf16 mixer output, bf16 autocast: the fused kernel ran and gives the
    add's and the norm's numbers (up to the multiply-add the compiler may fuse in the backward), and replays in a
    CUDA graph."""
    torch.manual_seed(0)
    x, update = torch.randn(65536, 128, device=DEVICE), torch.randn(65536, 128, device=DEVICE).bfloat16()
    weight, bias = torch.randn(128, device=DEVICE), torch.randn(128, device=DEVICE)
    fused, apart = fused_and_apart("triton", x, update, weight, bias, bf16=True)
    for a, r in zip(fused, apart):
        assert a.dtype == r.dtype
        assert_close_overall(a, r, 1e-6 if a.dtype == torch.float32 else 1e-3)
    assert_add_norm_replays_in_a_graph(x, update, weight, bias)
