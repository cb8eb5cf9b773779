"""Softmax attention's entry (``zoo.kernels.attention``): the dense form against SDPA and against autograd through the
same operations, its dropout, and which backend ``auto`` picks."""
import pytest
import torch

from zoo.kernels.attention import FUSED_HEAD_DIM_MAX, causal_mask, softmax_attention
from zoo.kernels.backend import last_backend

from tests.kernels.graph_capture import capture


def qkv(B=2, H=3, M=9, N=9, D=8, dtype=torch.float64, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, M, D, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(2))
    return [t.to(device, dtype).requires_grad_() for t in (q, k, v)]


def picked_mask(B, M, N, seed=1):
    """(B, 1, M, N): each of M queries at a random position sees the keys up to its position, as ``attend_at``."""
    pos = torch.randint(0, N, (B, M), generator=torch.Generator().manual_seed(seed))
    return torch.arange(N)[None, None, None, :] <= pos[:, None, :, None]


def outputs_and_grads(fn, tensors, seed=2):
    out = fn(*tensors)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    grad = grad.to(out.device, out.dtype)
    return [out, *torch.autograd.grad(out, tensors, grad)]


@pytest.mark.parametrize("mask_kind", ["causal", "picked"])
def test_dense_matches_sdpa_in_float64(mask_kind):
    q, k, v = qkv(M=5 if mask_kind == "picked" else 9)
    mask = None if mask_kind == "causal" else picked_mask(2, 5, 9)
    dense = outputs_and_grads(lambda *t: softmax_attention(*t, mask, backend="dense"), [q, k, v])
    assert last_backend("attention") == "dense"
    sdpa = outputs_and_grads(lambda *t: softmax_attention(*t, mask, backend="sdpa"), [q, k, v])
    assert last_backend("attention") == "sdpa"
    for got, want in zip(dense, sdpa):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_a_logit_bias_and_its_gradient_match_sdpa_with_a_float_mask():
    """GatedFWA's labelled rows: the decay u_i - u_j as a (B, H, M, N) bias, differentiable, under a window mask."""
    q, k, v = qkv(M=5)
    mask = picked_mask(2, 5, 9)
    bias = torch.randn(2, 3, 5, 9, generator=torch.Generator().manual_seed(4), dtype=torch.float64).requires_grad_()
    dense = outputs_and_grads(lambda *t: softmax_attention(*t[:3], mask, t[3], backend="dense"), [q, k, v, bias])
    sdpa = outputs_and_grads(lambda *t: softmax_attention(*t[:3], mask, t[3], backend="sdpa"), [q, k, v, bias])
    for got, want in zip(dense, sdpa):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert not dense[-1][~mask.expand(2, 3, 5, 9)].any()  # no gradient where the key is out of sight
    per_head = bias[:1, :, :1].detach().requires_grad_()  # broadcast over the batch and queries: summed back
    (g,) = torch.autograd.grad(softmax_attention(q, k, v, mask, per_head, backend="dense").sum(), per_head)
    (want,) = torch.autograd.grad(softmax_attention(q, k, v, mask, per_head, backend="sdpa").sum(), per_head)
    torch.testing.assert_close(g, want, rtol=1e-12, atol=1e-12)


def test_dense_backward_with_dropout_is_autograd_through_the_same_draws():
    """The written-out backward against autograd through the same operations, seeded alike: native_dropout draws
    the same mask for both, head by head."""
    q, k, v = qkv(M=6, N=11)
    mask = picked_mask(2, 6, 11)

    def reference(q, k, v):
        logits = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(~mask, float("-inf"))
        p = logits.softmax(-1)
        return torch.stack([torch.native_dropout(p[:, h], 0.3, True)[0] for h in range(q.shape[1])], 1) @ v

    torch.manual_seed(7)
    got = outputs_and_grads(lambda *t: softmax_attention(*t, mask, dropout_p=0.3, backend="dense"), [q, k, v])
    torch.manual_seed(7)
    want = outputs_and_grads(reference, [q, k, v])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.manual_seed(8)
    assert not torch.equal(softmax_attention(q, k, v, mask, dropout_p=0.3, backend="dense"), got[0])


def test_dense_dropout_averages_to_the_attention_without_it():
    """Dropout scales the kept probabilities by 1 / (1 - p): the mean over many draws is the undropped output."""
    q, k, v = (t.detach() for t in qkv(B=1, H=1, M=4, N=4, D=2))
    torch.manual_seed(0)
    mean = torch.stack([softmax_attention(q, k, v, dropout_p=0.5, backend="dense") for _ in range(4000)]).mean(0)
    exact = softmax_attention(q, k, v, backend="dense")
    torch.testing.assert_close(mean, exact, rtol=0, atol=0.1 * v.abs().max().item())


def test_bf16_inputs_give_bf16_outputs_and_gradients_close_to_float64():
    q, k, v = qkv(D=16)
    want = outputs_and_grads(lambda *t: softmax_attention(*t, backend="sdpa"), [q, k, v])
    low = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    got = outputs_and_grads(lambda *t: softmax_attention(*t, backend="dense"), low)
    for a, b in zip(got, want):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.double(), b, rtol=3e-2, atol=3e-2)


def test_causal_mask_of_the_last_queries():
    assert torch.equal(causal_mask(2, 4, "cpu"), torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))


def test_auto_takes_sdpa_on_a_cpu_and_bad_arguments_are_named():
    q, k, v = qkv(D=FUSED_HEAD_DIM_MAX + 8, M=3, N=3)
    softmax_attention(q, k, v)
    assert last_backend("attention") == "sdpa"
    with pytest.raises(ValueError, match="backend='flash'"):
        softmax_attention(q, k, v, backend="flash")
    with pytest.raises(ValueError, match="dropout_p=1.0"):
        softmax_attention(q, k, v, dropout_p=1.0, backend="dense")
    with pytest.raises(ValueError, match="mask.dtype"):
        softmax_attention(q, k, v, torch.ones(3, 3), backend="dense")
    with pytest.raises(ValueError, match="bias.dtype"):
        softmax_attention(q, k, v, None, torch.ones(3, 3, dtype=torch.long), backend="dense")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("mask_kind", ["causal", "picked"])
def test_gpu_auto_runs_dense_past_the_fused_head_dims_and_matches_sdpa_under_bf16(mask_kind):
    B, M, N, D = 4, (16 if mask_kind == "picked" else 128), 128, 512
    q, k, v = qkv(B=B, H=1, M=M, N=N, D=D, dtype=torch.bfloat16, device="cuda")
    mask = None if mask_kind == "causal" else picked_mask(B, M, N).cuda()
    got = outputs_and_grads(lambda *t: softmax_attention(*t, mask), [q, k, v])
    assert last_backend("attention") == "dense"
    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = outputs_and_grads(lambda *t: softmax_attention(*t, mask, backend="sdpa"), wide)
    for a, b in zip(got, want):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.double(), b, rtol=2e-2, atol=2e-2)
    softmax_attention(*(t[..., :FUSED_HEAD_DIM_MAX] for t in (q, k, v)), mask)
    assert last_backend("attention") == "sdpa"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_dropout_draws_anew_at_every_cuda_graph_replay():
    """The training step replays a CUDA graph: dropout's mask must be drawn again at each replay, not recorded."""
    q, k, v = (t.detach() for t in qkv(B=2, H=1, M=64, N=64, D=512, dtype=torch.bfloat16, device="cuda"))
    graph, out = capture(lambda: softmax_attention(q, k, v, dropout_p=0.5, backend="dense"))
    first = out.clone()
    graph.replay()
    assert not torch.equal(out, first)
    graph, out = capture(lambda: softmax_attention(q, k, v, backend="dense"))
    graph.replay()
    assert torch.equal(out, softmax_attention(q, k, v, backend="dense"))
