"""Attention from the labelled rows alone (``zoo.kernels.attention.attention_at_rows``): the Triton kernels
(interpreted on CPU, float32) against the reference (``softmax_attention`` with the visibility mask and the key bias,
float64), causal and windowed, with GatedFWA's key bias, padded query tiles, odd head dims and lengths, strided
views; dropout's mask read back through one-hot values and the gradients of that mask; on a GPU, bf16 at figure 2's
shape, the recorded backend and a CUDA graph drawing a new mask each replay."""
import pytest
import torch

from zoo.kernels.attention import attention_at_rows, rows_fit, visible_keys
from zoo.kernels.backend import last_backend
from graph_capture import capture

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def make(B=2, L=70, K=5, H=2, D=24, bias=False, device="cpu", dtype=torch.float32, seed=0):
    """q (B, K, H, D) and k, v (B, L, H, D) as views of one (B, L, 3, H, D) projection (attention's layout), distinct
    positions (B, K) as a strided slice, and a key bias (B, L, H) or None."""
    g = torch.Generator().manual_seed(seed)
    packed = torch.randn(B, L, 3, H, D, generator=g, dtype=torch.float64)
    positions = torch.stack([torch.randperm(L, generator=g)[:K] for _ in range(B)])
    positions = torch.cat([positions, positions], 1)[:, :K]  # strides (2K, 1), as a loader's slice
    q = torch.randn(B, K, H, D, generator=g, dtype=torch.float64)
    key_bias = -torch.rand(B, L, H, generator=g, dtype=torch.float64).cumsum(1) if bias else None
    to = dict(device=device, dtype=dtype)
    packed = packed.to(**to).requires_grad_()
    tensors = [q.to(**to).requires_grad_(), packed, None if key_bias is None else key_bias.to(**to).requires_grad_()]
    return tensors, positions.to(device)


def run(tensors, positions, window, p, backend, v_override=None):
    """o and the gradients of q, the packed k and v, and the key bias for a fixed output gradient."""
    q, packed, key_bias = tensors
    k, v = packed[:, :, 1], packed[:, :, 2]
    o = attention_at_rows(q, k, v if v_override is None else v_override, positions, window, key_bias, p,
                          backend=backend)
    leaves = [t for t in tensors if t is not None]
    grad = torch.randn(o.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(o)
    return [o, *torch.autograd.grad(o, leaves, grad)]


def close(got, want, rtol, atol):
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b.double(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("L, K, H, D, window, bias", [
    (70, 5, 2, 24, None, False),  # a padded query tile, head dim 24 in a tile of 32, keys past the last block
    (64, 16, 1, 32, None, False),  # figure 2's query tile: 16 rows, one head
    (70, 5, 2, 16, 9, False),  # SWA: a window
    (50, 7, 2, 16, 1, True),  # window 1 (each query sees its own key) and GatedFWA's key bias
    (130, 3, 1, 16, 40, True),  # three key blocks, the window skipping the first
])
def test_triton_matches_the_masked_reference(L, K, H, D, window, bias):
    tensors, positions = make(L=L, K=K, H=H, D=D, bias=bias)
    got = run(tensors, positions, window, 0.0, "triton")
    assert last_backend("attention_rows") == "triton"
    want = run([t if t is None else t.detach().double().requires_grad_() for t in tensors], positions, window, 0.0,
               "naive")
    assert last_backend("attention_rows") == "naive"
    assert len(got) == len(want) == 3 + bias
    close(got, want, 1e-5, 1e-5)
    # no gradient reaches the keys no query sees (a window skips the first ones; causal, those after the last query)
    seen = visible_keys(positions, L, window).any(2).squeeze(1)  # (B, L)
    assert not got[2][:, :, 1:][~seen].any()


def reference_with_mask(q, k, v, positions, window, key_bias, kept, p):
    """The reference's numbers with ``kept`` (B, H, K, L) as dropout's draw, float64, differentiable."""
    logits = torch.einsum("bmhd,bnhd->bhmn", q, k) * q.shape[-1] ** -0.5
    if key_bias is not None:
        logits = logits + key_bias.permute(0, 2, 1)[:, :, None, :]
    probs = logits.masked_fill(~visible_keys(positions, k.shape[1], window), float("-inf")).softmax(-1)
    return torch.einsum("bhmn,bnhd->bmhd", probs * kept / (1 - p), v)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("window, bias", [(None, False), (7, True)])
def test_dropout_draws_a_mask_at_the_rate_and_its_gradients_are_those_of_that_mask(device, window, bias):
    """With one-hot values (value j is the j-th unit vector) o is the dropped probabilities themselves: the mask
    drawn, read back. The same seed then gives the same mask with real values, whose output and gradients are the
    reference's with that mask."""
    p, L, D = 0.3, 24, 32
    tensors, positions = make(L=L, K=5, H=2, D=D, bias=bias, device=device)
    q, packed, key_bias = tensors
    one_hot = torch.eye(L, D, device=device).expand(2, 2, L, D).permute(0, 2, 1, 3)  # (B, L, H, D)
    torch.manual_seed(4)
    probs = attention_at_rows(q, packed[:, :, 1], one_hot, positions, window, key_bias, p, backend="triton")
    seen = visible_keys(positions, L, window).expand(2, 2, 5, L)
    kept = (probs.detach().permute(0, 2, 1, 3)[..., :L] != 0) & seen  # (B, H, K, L)
    rate = kept.sum().item() / seen.sum().item()
    assert 0.5 < rate < 0.9  # 1 - p = 0.7, over a few hundred seen scores
    torch.manual_seed(4)
    got = run(tensors, positions, window, p, "triton")
    double = [t if t is None else t.detach().double().requires_grad_() for t in tensors]
    q64, packed64, bias64 = double
    want = reference_with_mask(q64, packed64[:, :, 1], packed64[:, :, 2], positions, window, bias64, kept, p)
    leaves = [t for t in double if t is not None]
    grad = torch.randn(want.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(device)
    close(got, [want, *torch.autograd.grad(want, leaves, grad)], 1e-5, 1e-5)
    torch.manual_seed(5)
    again = attention_at_rows(q, packed[:, :, 1], one_hot, positions, window, key_bias, p, backend="triton")
    assert not torch.equal(again != 0, probs != 0)  # a new seed, a new mask


def test_auto_takes_the_reference_on_cpu_and_bad_inputs_are_value_errors():
    tensors, positions = make()
    q, packed, _ = tensors
    k, v = packed[:, :, 1], packed[:, :, 2]
    attention_at_rows(q, k, v, positions)
    assert last_backend("attention_rows") == "naive"
    with pytest.raises(ValueError, match=r"positions \(2, 4\) are not valid: expected q \(B, K, H, D\)"):
        attention_at_rows(q, k, v, positions[:, :4])
    with pytest.raises(ValueError, match="window=0 is not valid"):
        attention_at_rows(q, k, v, positions, window=0)
    with pytest.raises(ValueError, match="dropout_p=1.0 is not valid"):
        attention_at_rows(q, k, v, positions, dropout_p=1.0)
    with pytest.raises(ValueError, match="backend='cudnn' is not valid"):
        attention_at_rows(q, k, v, positions, backend="cudnn")
    assert rows_fit(16, 128) and rows_fit(64, 128) and rows_fit(16, 256)
    assert not rows_fit(64, 256) and not rows_fit(16, 512)  # SDPA or the dense form: past a program's registers


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("H, D, window, bias", [(1, 128, None, False), (2, 64, 128, False), (2, 64, 128, True),
                                                (1, 256, None, False)])
def test_gpu_auto_runs_triton_at_figure_2_in_bf16(H, D, window, bias):
    """B=64, L=256, 16 labelled rows: softmax's last block (one head of 128; of 256 at d_model 256, 8 warps), SWA's
    and GatedFWA's (two heads of 64, the window N / 2): bf16 at most twice as far from the float64 reference as the
    reference in bf16 is."""
    tensors, positions = make(B=64, L=256, K=16, H=H, D=D, bias=bias, device="cuda", dtype=torch.bfloat16)
    if bias:
        tensors[2] = tensors[2].detach().float().requires_grad_()
    got = run(tensors, positions, window, 0.0, "auto")
    assert last_backend("attention_rows") == "triton"
    exact = run([t if t is None else t.detach().double().requires_grad_() for t in tensors], positions, window, 0.0,
                "naive")
    rounded = run(tensors, positions, window, 0.0, "naive")
    for g, r, e in zip(got, rounded, exact):
        scale = float(e.abs().max())
        assert (g.double() - e).abs().max().item() <= 2 * (r.double() - e).abs().max().item() + 1e-3 * scale


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_each_cuda_graph_replay_draws_a_new_mask():
    tensors, positions = make(B=8, L=128, K=16, H=1, D=128, device="cuda", dtype=torch.bfloat16)
    q, packed, _ = tensors
    one_hot = torch.eye(128, device="cuda", dtype=torch.bfloat16).expand(8, 1, 128, 128).permute(0, 2, 1, 3)

    def step():
        out = attention_at_rows(q, packed[:, :, 1], one_hot, positions, None, None, 0.25)
        return (out, *torch.autograd.grad(out.float().square().sum(), (q, packed)))

    graph, captured = capture(step, warmups=2)
    masks = []
    for _ in range(2):
        graph.replay()
        masks.append(captured[0] != 0)
    assert last_backend("attention_rows") == "triton"
    seen = visible_keys(positions, 128).expand(8, 1, 16, 128).permute(0, 2, 1, 3)
    assert not torch.equal(masks[0], masks[1])
    assert abs(masks[1][seen].float().mean().item() - 0.75) < 0.02
