"""The embedding, learned positions and dropout in one op (``zoo.kernels.embedding.embedding_dropout``): the Triton
pass (interpreted on CPU) keeps PyTorch's values where it keeps them, drops the rest at the asked rate, follows the
seed of ``torch.manual_seed``, and its gradients are those of the reference with the same mask; on a GPU, the
recorded backend, the MQAR shape and CUDA graphs (a new mask each replay)."""
import pytest
import torch
import torch.nn.functional as F

from zoo.kernels import backend
from zoo.kernels.embedding import embedding_dropout
from graph_capture import capture

P = 0.25


def inputs(B=4, L=16, V=30, D=24, device="cpu", positions=True):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (B, L), generator=g).to(device)
    weight = torch.randn(V, D, generator=g).to(device).requires_grad_()
    pos = torch.randn(L, D, generator=g).to(device).requires_grad_() if positions else None
    return ids, weight, pos


def reference_with_mask(ids, weight, pos, kept, p):
    """The reference's numbers with ``kept`` as dropout's draw: (weight[ids] + pos) * (kept / (1 - p)), the scaled
    mask times the sum, as ``F.dropout`` computes it."""
    x = F.embedding(ids, weight)
    return (x if pos is None else x + pos) * (kept * (1 / (1 - p)))


def check_against_the_reference(ids, weight, pos, name, p=P, tol=1e-6):
    """Dropout's output, as the reference's with the mask it drew, bit for bit; the gradients of weight and positions
    as the reference's with that mask, to the order of their sums (``tol``)."""
    torch.manual_seed(3)
    out = embedding_dropout(ids, weight, pos, p, backend=name)
    assert backend.last_backend("embedding_dropout") == name
    kept = out != 0  # a kept value is nonzero (continuous inputs)
    want = reference_with_mask(ids, weight, pos, kept, p)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    grad = torch.randn_like(out)
    leaves = [t for t in (weight, pos) if t is not None]
    got_grads = torch.autograd.grad(out, leaves, grad)
    want_grads = torch.autograd.grad(want, leaves, grad)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)
    return kept


@pytest.mark.parametrize("positions", [True, False])
def test_triton_keeps_pytorch_s_values_and_gives_the_gradients_of_its_mask(positions):
    kept = check_against_the_reference(*inputs(positions=positions), "triton")
    rate = kept.float().mean().item()  # 1536 values: 5 standard deviations of the kept share are 0.055
    assert abs(rate - (1 - P)) < 0.055


def test_the_reference_is_f_dropout_of_the_sum():
    check_against_the_reference(*inputs(), "naive")


def test_the_mask_follows_the_seed_and_changes_from_call_to_call():
    ids, weight, pos = inputs()
    torch.manual_seed(5)
    first, second = (embedding_dropout(ids, weight, pos, P, backend="triton") for _ in range(2))
    torch.manual_seed(5)
    again = embedding_dropout(ids, weight, pos, P, backend="triton")
    assert torch.equal(first, again) and not torch.equal(first != 0, second != 0)


def test_no_dropout_is_the_sum_and_bad_inputs_are_value_errors():
    ids, weight, pos = inputs()
    want = F.embedding(ids, weight) + pos
    torch.testing.assert_close(embedding_dropout(ids, weight, pos, 0.0, backend="triton"), want, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"p=1.0 is not valid"):
        embedding_dropout(ids, weight, pos, 1.0)
    with pytest.raises(ValueError, match=r"expected ids \[B, L\] and positions \[L, D\] = \[16, 24\]"):
        embedding_dropout(ids, weight, pos[:8], P)
    with pytest.raises(ValueError, match="backend='cuda' is not valid"):
        embedding_dropout(ids, weight, pos, P, backend="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_auto_runs_triton_at_the_mqar_shape():
    ids, weight, pos = inputs(256, 256, 8192, 128, device="cuda")
    torch.manual_seed(3)
    out = embedding_dropout(ids, weight, pos, 0.1)
    assert backend.last_backend("embedding_dropout") == "triton"
    assert abs((out != 0).float().mean().item() - 0.9) < 1e-3  # 8.4M values: the share within 3 standard deviations
    check_against_the_reference(ids, weight, pos, "triton", p=0.1, tol=1e-4)  # sums of 256 and of ~8 rows of 1024


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_each_cuda_graph_replay_draws_a_new_mask_with_the_same_rate():
    ids, weight, pos = inputs(64, 128, 500, 64, device="cuda")

    def step():
        out = embedding_dropout(ids, weight, pos, P)
        return (out, *torch.autograd.grad(out.square().sum(), (weight, pos)))

    graph, captured = capture(step, warmups=2)
    masks = []
    for _ in range(2):
        graph.replay()
        out = captured[0]
        kept = out != 0
        masks.append(kept.clone())
        torch.testing.assert_close(out, reference_with_mask(ids, weight, pos, kept, P), rtol=0, atol=0)
        want = torch.autograd.grad(reference_with_mask(ids, weight, pos, kept, P).square().sum(), (weight, pos))
        for g, w in zip(captured[1:], want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert not torch.equal(masks[0], masks[1])
    assert abs(masks[1].float().mean().item() - (1 - P)) < 0.01


def test_masks_drawn_by_flat_index_only_below_2_to_the_31_values():
    """The dropout kernels index each value's mask by an int32: from 2 ** 31 values on the op takes the reference and
    the gathering norm refuses the Triton backend (expanded ids: no memory)."""
    from zoo.kernels.embedding import masks_by_flat_index
    from zoo.kernels.layer_norm import embedding_layer_norm
    table = torch.randn(4, 128)
    below, at = (torch.zeros(1, 1, dtype=torch.long).expand(2 ** 14, n) for n in (2 ** 10 - 1, 2 ** 10))
    assert masks_by_flat_index(below, table) and not masks_by_flat_index(at, table)
    with pytest.raises(ValueError, match=r"not valid for backend='triton' with dropout: expected ids.numel\(\) \* N"):
        embedding_layer_norm(at, table, None, None, None, backend="triton", dropout=0.1)
