"""``zoo.kernels.shifted_linear``: the folded form (one matmul of [x, x_prev] with the token-shift mixes folded into
the weights) against the reference (each mix made, one matmul per weight): outputs and every gradient in float64,
RWKV-7's seven projections of six mixes, a part left out of the loss, the compiled pieces against their plain forms,
bf16 autocast, backend choice and bad inputs; on a GPU, training under bf16 autocast runs the folded form compiled."""
import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.shifted_linear import shifted_linear
from zoo.kernels.shifted_linear.folded import FOLD_COMPILED, PAIR_COMPILED, fold, pair

B, T, D = 2, 9, 12
SIZES = (12, 12, 12, 4, 4, 8, 4)  # RWKV-7's r, k, v and its LoRAs' down projections, small
MIX_OF = (0, 2, 3, 1, 4, 5, 3)


def leaves(dtype=torch.float64, device="cpu", sizes=SIZES, G=6):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, D, generator=g, dtype=dtype)
    mixes = torch.rand(G, D, generator=g, dtype=dtype)
    weights = [torch.randn(n, D, generator=g, dtype=dtype) / D ** 0.5 for n in sizes]
    return [t.to(device).requires_grad_() for t in (x, mixes, *weights)]


def outputs_and_grads(backend_name, tensors, mix_of=MIX_OF, use=None, autocast=False):
    """(*parts, dx, dmixes, *dweights) for a fixed random projection of the parts in ``use`` (all by default)."""
    x, mixes, *weights = tensors
    device = x.device.type
    with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
        y = shifted_linear(x, mixes, weights, mix_of, backend=backend_name)
    assert y.shape == x.shape[:2] + (sum(w.shape[0] for w in weights),)
    parts = y.split([w.shape[0] for w in weights], -1)
    use = range(len(parts)) if use is None else use
    g = torch.Generator().manual_seed(1)
    loss = sum((parts[i].double() * torch.randn(parts[i].shape, generator=g, dtype=torch.float64).to(device)).sum()
               for i in use)
    return (*(p.detach() for p in parts), *torch.autograd.grad(loss, tensors, materialize_grads=True))


def test_folded_matches_the_reference_in_float64():
    """The fold is an identity, W (x + (x_prev - x) mu) = W (1 - mu) x + W mu x_prev: equal to float64's rounding,
    every part and the gradients of x, of each mix (v's feeds two projections) and of each weight."""
    got = outputs_and_grads("folded", leaves())
    want = outputs_and_grads("naive", leaves())
    assert len(got) == len(SIZES) + 2 + len(SIZES)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype == torch.float64
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    assert backend.last_backend("shifted_linear") == backend.NAIVE


def test_a_part_left_out_and_an_unused_mix():
    """Parts 0 and 2 only in the loss (part 1's weight gets a zero gradient, and so does its mix 3); mixes 1, 2, 4, 6
    and 7 are read by no weight (zero gradients too)."""
    sizes, mix_of = (5, 3, 7), (0, 3, 5)
    got = outputs_and_grads("folded", leaves(sizes=sizes, G=8), mix_of, use=(0, 2))
    want = outputs_and_grads("naive", leaves(sizes=sizes, G=8), mix_of, use=(0, 2))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    dmixes = got[len(sizes) + 1]
    assert dmixes[[1, 2, 3, 4, 6, 7]].abs().max() == 0 and dmixes[[0, 5]].abs().min() > 0


def test_bf16_autocast_rounds_like_the_reference():
    """Under bf16 autocast both run bf16 matmuls (the reference rounds each mix to bf16, the folded form x, x_prev and
    the folded weight): the parts agree to a few bf16 roundings, the gradients in float32 too."""
    got = outputs_and_grads("folded", leaves(torch.float32), autocast=True)
    want = outputs_and_grads("naive", leaves(torch.float32), autocast=True)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=3e-2 * float(w.abs().max()))


def test_the_compiled_pieces_match_their_plain_forms():
    """``pair`` and ``fold`` traced whole by torch.compile (``aot_eager``: CI's CPU need not have a C++ compiler),
    forward and backward, against the functions as written."""
    x, mixes, *weights = leaves()
    for compiled, args in ((PAIR_COMPILED, (x, torch.float64)), (FOLD_COMPILED, (mixes, MIX_OF, *weights))):
        got = compiled(*args, fallback=False, compiler="aot_eager")
        want = compiled.fn(*args)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        dy = torch.randn(want.shape, dtype=want.dtype)
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        for g, w in zip(torch.autograd.grad(got, inputs, dy), torch.autograd.grad(want, inputs, dy)):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_pair_and_fold_are_what_their_docstrings_say():
    x, mixes, *weights = leaves()
    x2 = pair(x, torch.float32)
    assert x2.dtype == torch.float32 and x2.shape == (B, T, 2 * D)
    assert torch.equal(x2[..., :D], x.float()) and torch.equal(x2[:, 1:, D:], x[:, :-1].float())
    assert x2[:, 0, D:].abs().max() == 0
    w2 = fold(mixes, MIX_OF, *weights)
    row = sum(SIZES[:5]) + 3  # the 4th row of the g LoRA's down projection, which reads mix 5
    w = weights[5][3]
    torch.testing.assert_close(w2[row], torch.cat([w * (1 - mixes[5]), w * mixes[5]]))


def test_backend_choice_and_bad_inputs():
    x, mixes, *weights = leaves()
    shifted_linear(x, mixes, weights, MIX_OF)
    assert backend.last_backend("shifted_linear") == backend.NAIVE  # auto on CPU
    with pytest.raises(ValueError, match="backend='triton' is not valid"):
        shifted_linear(x, mixes, weights, MIX_OF, backend="triton")
    bad = [(x[0], mixes, weights, MIX_OF), (x, mixes[:, :5], weights, MIX_OF), (x, mixes, [], ()),
           (x, mixes, weights, MIX_OF[:-1]), (x, mixes, weights, MIX_OF[:-1] + (6,)),
           (x, mixes, weights[:-1] + [weights[-1][:, :5]], MIX_OF)]
    for args in bad:
        with pytest.raises(ValueError, match="expected x \\[B, T, D\\], mixes \\[G, D\\]"):
            shifted_linear(*args)


@pytest.mark.gpu
def test_training_on_gpu_runs_the_folded_form_compiled():
    """Training's call on a GPU (bf16 autocast, gradients on) takes the folded path, its two pieces compiled, and
    matches the reference to bf16's rounding: every part and every gradient."""
    got = outputs_and_grads("auto", leaves(torch.float32, "cuda"), autocast=True)
    assert backend.last_backend("shifted_linear") == "folded"
    assert PAIR_COMPILED.failed is None and FOLD_COMPILED.failed is None
    assert len(PAIR_COMPILED._by_compiler) == len(FOLD_COMPILED._by_compiler) == 1
    want = outputs_and_grads("naive", leaves(torch.float32, "cuda"), autocast=True)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=3e-2 * float(w.abs().max()))
