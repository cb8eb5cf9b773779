"""The sorted-sum embedding backward against F.embedding's: values, run-to-run bit equality, backend choice."""

import pytest
import torch
import torch.nn.functional as F

import zoo.kernels.layer_norm as layer_norm_module
from zoo.kernels import backend
from zoo.kernels.embedding import Embedding, embedding
from zoo.kernels.embedding.sorted_sum import embedding_backward, occurrences, sort_key
from zoo.kernels.layer_norm import add_layer_norm
from graph_capture import capture

V = 50
SMALL_TILES = dict(block_t=4, block_k=2, block_d=16)  # every loop of both passes runs several times


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def heavy_ids(shape=(3, 100), seed=0):
    """Ids in [0, 40) (rows 40..49 unused), id 7 at 200 of the 300 slots."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 40, shape, generator=g)
    ids.view(-1)[torch.randperm(ids.numel(), generator=g)[:200]] = 7
    return ids


def weight_grad(ids, weight, grad, backend_name):
    weight = weight.detach().requires_grad_()
    out = embedding(ids, weight, backend=backend_name)
    assert backend.last_backend("embedding") == backend_name
    return out, torch.autograd.grad(out, weight, grad)[0]


@pytest.mark.parametrize("D", [24, 32])
def test_triton_backward_matches_reference_and_is_bitwise_repeatable(D):
    ids = heavy_ids()
    weight, grad = torch.randn(V, D), torch.randn(*ids.shape, D)
    out, got = weight_grad(ids, weight, grad, "triton")
    torch.testing.assert_close(out, F.embedding(ids, weight), rtol=0, atol=0)
    _, want = weight_grad(ids, weight, grad, "naive")
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)  # row 7 sums 200 values
    assert not got[40:].any()
    assert torch.equal(got, weight_grad(ids, weight, grad, "triton")[1])


@pytest.mark.parametrize("rows, key", [(32766, torch.int16), (32767, torch.int32), (40000, torch.int32)])
def test_occurrences_of_the_last_rows_at_every_key_width(rows, key):
    ids = torch.tensor([[rows - 1, 5, rows - 1, 0], [rows - 2, rows - 1, 5, rows // 2]])
    bounds, order = occurrences(ids, rows)
    assert sort_key(rows) == key
    flat = ids.reshape(-1)
    for row in (0, 5, rows // 2, rows - 2, rows - 1):
        assert order[bounds[row]:bounds[row + 1]].tolist() == (flat == row).nonzero().flatten().tolist()
    assert bounds[-1] == flat.numel() and bounds[1] == 1 and (bounds[6:rows // 2 + 1] == 3).all()


@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16])
def test_small_tiles_and_bf16_grad_output(grad_dtype):
    ids, D = heavy_ids(), 24
    grad = torch.randn(*ids.shape, D).to(grad_dtype)
    want = torch.zeros(V, D).index_add_(0, ids.reshape(-1), grad.reshape(-1, D).float())
    got = embedding_backward(grad, ids, V, torch.float32, **SMALL_TILES)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)  # row 7 sums 200 values
    assert torch.equal(got, embedding_backward(grad, ids, V, torch.float32, **SMALL_TILES))


def test_bf16_table_gets_a_bf16_gradient():
    ids = heavy_ids()
    weight, grad = torch.randn(V, 32, dtype=torch.bfloat16), torch.randn(*ids.shape, 32, dtype=torch.bfloat16)
    _, got = weight_grad(ids, weight, grad, "triton")
    assert got.dtype == torch.bfloat16
    want = torch.zeros(V, 32).index_add_(0, ids.reshape(-1), grad.reshape(-1, 32).float())
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)  # one bf16 rounding of a float32 sum


def test_tied_weight_gets_both_gradients():
    """The model's head reuses the table: autograd adds the head's gradient to the embedding's."""
    ids = heavy_ids()
    weight = torch.randn(V, 24)
    grads = {}
    for name in ("triton", "naive"):
        w = weight.clone().requires_grad_()
        (embedding(ids, w, backend=name) @ w.t()).square().sum().backward()
        grads[name] = w.grad
    torch.testing.assert_close(grads["triton"], grads["naive"], rtol=1e-5, atol=1e-4)


def test_auto_is_the_reference_on_cpu_and_bad_backends_raise():
    ids, weight = heavy_ids(), torch.randn(V, 8)
    torch.testing.assert_close(embedding(ids, weight), F.embedding(ids, weight), rtol=0, atol=0)
    assert backend.last_backend("embedding") == "naive"
    with pytest.raises(ValueError, match="backend='sparse'.*auto, triton, naive"):
        embedding(ids, weight, backend="sparse")


def test_module_is_an_embedding_and_rejects_options_it_lacks():
    table = Embedding(V, 8)
    assert isinstance(table, torch.nn.Embedding) and set(table.state_dict()) == {"weight"}
    torch.testing.assert_close(table(heavy_ids()), F.embedding(heavy_ids(), table.weight))
    with pytest.raises(ValueError, match="padding_idx"):
        Embedding(V, 8, padding_idx=0)


MQAR_SHAPE = (64, 1024, 8192, 128)  # batch, length, vocabulary, width: 65536 ids into 8192 x 128


def mqar_like_ids(B, L, vocab, device, seed=0):
    """Uniform ids with token 0 at about a third of the slots (a frequent filler token)."""
    g = torch.Generator(device).manual_seed(seed)
    ids = torch.randint(0, vocab, (B, L), generator=g, device=device)
    return ids.masked_fill(torch.rand(B, L, generator=g, device=device) < 0.3, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16])
def test_gpu_matches_reference_at_mqar_shape(grad_dtype):
    B, L, vocab, D = MQAR_SHAPE
    ids = mqar_like_ids(B, L, vocab, "cuda")
    weight = torch.randn(vocab, D, device="cuda")
    grad = torch.randn(B, L, D, device="cuda").to(grad_dtype)
    got = embedding_backward(grad, ids, vocab, torch.float32)
    want = torch.zeros(vocab, D, device="cuda").index_add_(0, ids.reshape(-1), grad.reshape(-1, D).float())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-3)  # row 0 sums ~20000 values of size 1
    assert torch.equal(got, embedding_backward(grad, ids, vocab, torch.float32))
    _, via_autograd = weight_grad(ids, weight, grad.float(), "triton")
    _, reference = weight_grad(ids, weight, grad.float(), "naive")
    torch.testing.assert_close(via_autograd, reference, rtol=1e-5, atol=1e-3)


@pytest.mark.gpu
def test_gpu_backward_is_captured_by_a_cuda_graph():
    """No host sync: the whole backward replays from a graph, with the same bits as eagerly."""
    B, L, vocab, D = MQAR_SHAPE
    ids = mqar_like_ids(B, L, vocab, "cuda")
    grad = torch.randn(B, L, D, device="cuda")
    eager = embedding_backward(grad, ids, vocab, torch.float32)
    graph, captured = capture(lambda: embedding_backward(grad, ids, vocab, torch.float32))
    grad.copy_(torch.randn_like(grad))
    graph.replay()
    assert torch.equal(captured, embedding_backward(grad, ids, vocab, torch.float32))
    assert not torch.equal(captured, eager)


@pytest.mark.gpu
def test_gpu_model_step_runs_the_triton_backward(monkeypatch):
    from zoo.model import LanguageModel

    B, L, vocab, D = 64, 64, 8192, 128  # one key block per sequence: the attention backward is deterministic
    torch.manual_seed(0)
    model = LanguageModel(vocab, D, n_layers=2, max_seq_len=L, dropout=0.0).cuda()
    ids = mqar_like_ids(B, L, vocab, "cuda")

    def embed_grad():
        model.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model.logits(model(ids)).flatten(0, 1).float(), ids.flatten())
        loss.backward()
        return model.embed.weight.grad.clone()

    backend.clear()
    got = embed_grad()  # the first norm gathers the rows (embedding_layer_norm) and sums their gradient here
    assert backend.last_backend("embedding") == backend.last_backend("layer_norm") == "triton"
    assert torch.equal(got, embed_grad())

    def pytorch_gather(ids, table, update, weight, bias, eps, to_matmul=False, rows=None, dropout=0.0):  # its gather
        assert dropout == 0  # and backward (the model has no embedding dropout)
        return add_layer_norm(F.embedding(ids, table), update, weight, bias, eps, to_matmul=to_matmul, rows=rows)

    monkeypatch.setattr(layer_norm_module, "embedding_layer_norm", pytorch_gather)
    torch.testing.assert_close(got, embed_grad(), rtol=1e-4, atol=1e-6)


@pytest.mark.gpu
def test_gpu_compiled_function_calls_the_kernel_as_is():
    B, L, vocab, D = 8, 128, 8192, 128
    ids = mqar_like_ids(B, L, vocab, "cuda")
    weight = torch.randn(vocab, D, device="cuda", requires_grad=True)

    @torch.compile
    def loss(ids, weight):
        return (embedding(ids, weight) * 2).square().sum()

    loss(ids, weight).backward()
    assert backend.last_backend("embedding") == "triton"
    got, weight.grad = weight.grad, None
    (F.embedding(ids, weight) * 2).square().sum().backward()
    torch.testing.assert_close(got, weight.grad, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 3, 64])
def test_vocabulary_rows_per_program_change_only_the_speed(rows):
    """Pass 2 walks ``rows`` vocabulary rows a program (V = 50 is no multiple of 3 or 64); rows of one piece are
    written by pass 1, row 7 (several pieces) by pass 2, unused rows get zeros: the same bits at any count."""
    ids, D = heavy_ids(), 24
    grad = torch.randn(*ids.shape, D)
    got = embedding_backward(grad, ids, V, torch.float32, rows=rows, warps=(2, 1))
    assert torch.equal(got, embedding_backward(grad, ids, V, torch.float32))
    want = torch.zeros(V, D).index_add_(0, ids.reshape(-1), grad.reshape(-1, D))
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
