"""The language model's residual stream: each block's residual add is left to the norm after it
(``LayerNorm.after_add``); the model computes the same numbers as adding first and normalizing after, outputs and
every parameter's gradient, on the reference norms and on the Triton ones (interpreted on CPU). Norms that feed one
matmul write autocast's dtype, and the last block and the final norm run on the labelled rows alone: the same numbers
again (to rounding where a matmul sums fewer rows)."""
import copy
import functools

import pytest
import torch
from torch import nn

import zoo.kernels.layer_norm as layer_norm_op
import zoo.model as model_module
from zoo.kernels import backend
from zoo.kernels.layer_norm import LayerNorm
from zoo.kernels.rows import rows_at
from zoo.mixers.attention import MultiHeadMixer
from zoo.model import LanguageModel


def unfused_forward(model: LanguageModel, ids: torch.Tensor) -> torch.Tensor:
    """The model's forward with every residual add apart from its norm: x + mixer(norm1(x)), then
    x + state_mixer(norm2(x)) unless the state mixer is "identity" (for "normed", Zoology's Identity, x + norm2(x))."""
    x = model.embed(ids)
    if model.pos_embed is not None:
        x = x + model.pos_embed.weight[:ids.shape[1]]
    x = nn.functional.dropout(x, model.embed_dropout, model.training)
    for block in model.blocks:
        x = x + block.mixer(block.norm1(x))
        if block.state_mixer is not None:
            x = x + block.state_mixer(block.norm2(x))
    return model.norm(x)


def output_and_grads(model, forward, ids, bf16, norms):
    model = copy.deepcopy(model)
    torch.manual_seed(1)  # the same dropout draws
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        hidden = forward(model, ids)
    assert backend.last_backend("layer_norm") == norms
    hidden.float().square().sum().backward()
    return [hidden] + [p.grad for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("mixer, state_mixer", [("softmax", "identity"), ("hyena", "mlp"), ("rwkv", "identity"),
                                                ("softmax", "normed")])
@pytest.mark.parametrize("norms, bf16", [("naive", False), ("naive", True), ("triton", False)])
def test_fused_residual_adds_give_the_unfused_numbers(monkeypatch, mixer, state_mixer, norms, bf16):
    """Bit for bit. (Under bf16 autocast the Triton interpreter rounds the bf16 gradient toward zero where a GPU
    rounds to nearest; the GPU test of ``add_layer_norm`` covers that case.)"""
    if norms == "triton":
        monkeypatch.setattr(layer_norm_op, "named_or_gpu", lambda backend, name, x: backend in (name, "auto"))
    torch.manual_seed(0)
    model = LanguageModel(40, 32, n_layers=2, mixer=mixer, max_seq_len=16, state_mixer=state_mixer)
    ids = torch.randint(0, 40, (2, 16))
    fused = output_and_grads(model, lambda m, i: m(i), ids, bf16, norms)
    apart = output_and_grads(model, unfused_forward, ids, bf16, norms)
    assert len(fused) == len(apart) > 1
    for a, b in zip(fused, apart):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def torch_norm(norm: LayerNorm) -> nn.LayerNorm:
    """PyTorch's LayerNorm with ``norm``'s parameters."""
    plain = nn.LayerNorm(norm.normalized_shape, eps=norm.eps)
    plain.load_state_dict(norm.state_dict())
    return plain


def logits_and_grads(model, forward, ids, positions, bf16):
    """The head's logits at ``positions`` from ``forward(model, ids, positions)`` and every parameter's gradient."""
    model = copy.deepcopy(model)
    torch.manual_seed(1)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model.logits(forward(model, ids, positions))
    logits.float().square().sum().backward()
    return [logits] + [p.grad for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("mixer, state_mixer", [("softmax", "mlp"), ("hyena", "identity"), ("mamba", "identity"),
                                                ("gatedfwa", "identity"), ("softmax", "normed")])
@pytest.mark.parametrize("bf16", [False, True])
def test_norms_write_what_their_matmul_reads_and_the_final_norm_only_labelled_rows(monkeypatch, mixer, state_mixer,
                                                                                   bf16):
    """Bit for bit against the plain model (every norm float32 under autocast, the final norm on every row, then the
    labelled rows picked; to rounding with an MLP, which the last block runs on the labelled rows alone). Under bf16
    autocast a norm that feeds one matmul writes bf16: the cast the matmul made.
    (Attention from the labelled rows alone, which rounds otherwise, is off here: the next test covers it.)"""
    monkeypatch.setattr(model_module, "PICKED_SHARE", 0.0)
    torch.manual_seed(0)
    model = LanguageModel(40, 32, n_layers=2, mixer=mixer, max_seq_len=16, state_mixer=state_mixer)
    assert model.norm.to_matmul and model.blocks[0].norm2.to_matmul == (state_mixer == "mlp")
    assert model.blocks[0].norm1.to_matmul  # GatedFWA's gates too: all its projections of x are one linear_parts
    plain = copy.deepcopy(model)  # PyTorch's norms, each residual add apart, every row normalized
    for parent in [plain, *plain.blocks]:
        for name, norm in list(parent.named_children()):
            if isinstance(norm, LayerNorm):
                setattr(parent, name, torch_norm(norm))
    ids, positions = torch.randint(0, 40, (2, 16)), torch.tensor([[3, 7, 15], [0, 8, 9]])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        hidden = model(ids, positions)
    assert hidden.shape == (2, 3, 32) and hidden.dtype == (torch.bfloat16 if bf16 else torch.float32)
    got = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, bf16)
    want = logits_and_grads(plain, lambda m, i, p: rows_at(unfused_forward(m, i), p), ids, positions, bf16)
    assert len(got) == len(want) > 1
    # the last block's MLP runs on the labelled rows alone, so its matmuls and weight gradients sum in another order
    exact = dict(rtol=0, atol=0) if state_mixer == "identity" else dict(rtol=1e-5, atol=1e-6)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **exact)


@pytest.mark.parametrize("mixer", ["softmax", "mamba"])
def test_the_triton_norms_pick_the_last_block_s_rows_as_the_reference_norms_do(monkeypatch, mixer):
    """The last block's norm returns the stream at the labelled rows alone and adds their gradient in its backward
    pass (``add_layer_norm``'s ``rows``): on the Triton norms (interpreted) the reference norms' logits and gradients,
    to the rounding of their float32 sums."""
    torch.manual_seed(0)
    model = LanguageModel(40, 32, n_layers=2, mixer=mixer, max_seq_len=16, dropout=0.0)
    ids, positions = torch.randint(0, 40, (2, 16)), torch.tensor([[3, 7, 15], [0, 8, 9]])
    want = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, False)
    assert backend.last_backend("layer_norm") == "naive"
    monkeypatch.setattr(layer_norm_op, "named_or_gpu", lambda backend, name, x: backend in (name, "auto"))
    got = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, False)
    assert backend.last_backend("layer_norm") == "triton"
    assert len(got) == len(want) > 1
    # Each tensor within 1e-5 of its own largest value: the two norms' float32 sums round apart, and Mamba's scan
    # carries that rounding into every gradient (its embedding gradient, up to 7.6, was 4.3e-6 apart with Triton 3.9's
    # interpreter: 3e-5 of a small element, past an elementwise 1e-5). A wrong row picked or a gradient added in the
    # wrong place is off by the values themselves.
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()))


@pytest.fixture
def picked(monkeypatch) -> list[int]:
    """The number of keys L of every attention from the labelled rows alone, in order (``MultiHeadMixer.attend_at``:
    softmax's, swa's and GatedFWA's picked forward)."""
    calls = []
    attend_at = MultiHeadMixer.attend_at
    monkeypatch.setattr(MultiHeadMixer, "attend_at", lambda self, q, k, *args: calls.append(k.shape[1]) or
                        attend_at(self, q, k, *args))
    return calls


@pytest.mark.parametrize("mixer, kwargs, picks", [
    ("softmax", {}, True), ("softmax", {"positions": "rope", "state_mixer": "mlp"}, True),
    ("softmax", {"state_mixer": "normed"}, True),
    ("swa", {"mixer_kwargs": {"window": 5}}, True), ("gatedfwa", {"mixer_kwargs": {"window": 5}}, True),
    ("gatedfwa", {"mixer_kwargs": {"variant": "released", "k_shift": True, "v_shift": True}, "positions": "rope"},
     True), ("gatedfwa", {"mixer_kwargs": {"decay": False, "output_gate": False}}, True), ("hyena", {}, False),
    ("based", {"layers": [{}, {"mixer": "swa", "mixer_kwargs": {"window": 5}}]}, True),  # BASED's hybrid, swa last
    ("swa", {"layers": [{}, {"mixer": "hyena"}], "state_mixer": "mlp"}, False)])
def test_last_block_computes_its_outputs_at_the_labelled_rows_alone(picked, mixer, kwargs, picks):
    """The model's outputs at K <= L / 4 labelled rows, and every parameter's gradient, are those of the full forward
    at those rows (float64, no dropout); attention mixers attend from those K queries alone in their last block
    (GatedFWA with its decay as a logit bias), at more rows from every query, and the others compute every row and
    pick."""
    torch.manual_seed(0)
    model = LanguageModel(40, 32, n_layers=2, mixer=mixer, max_seq_len=32, dropout=0.0, **kwargs).double()
    ids = torch.randint(0, 40, (3, 32))
    positions = torch.tensor([[3, 7, 15, 31, 0, 0, 0, 0], [24, 25, 26, 27, 28, 29, 30, 31],
                              [0, 1, 2, 9, 17, 18, 19, 20]])
    got = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, False)
    want = logits_and_grads(model, lambda m, i, p: rows_at(m(i), p), ids, positions, False)
    assert len(got) == len(want) > 1
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert picked == ([32] if picks else [])  # one call, the last block's, over all 32 keys
    model(ids, torch.zeros(3, 9, dtype=torch.long))  # 9 rows of 32: more than a quarter
    assert len(picked) == picks


@pytest.mark.parametrize("mixer, projection, kwargs", [
    ("mamba", "out_proj", {}), ("mamba2", "out_proj", {}), ("hyena", "out_proj", {}), ("rwkv", "output", {}),
    ("rwkv7", "o_proj", {"head_dim": 16}), ("based", "inner.o_proj", {}), ("gla", "o_proj", {}),
    ("retnet", "o_proj", {}), ("hgrn2", "o_proj", {}), ("deltanet", "o_proj", {}), ("gated_deltanet", "o_proj", {})])
def test_recurrent_and_conv_mixers_project_the_labelled_rows_alone(mixer, projection, kwargs):
    """The other mixers run their sequence work on every row, then their last projection on the K labelled rows of
    the last block alone: the same outputs and gradients as the full forward's rows (float64), the projection fed
    (B, K, .) rows."""
    torch.manual_seed(0)
    model = LanguageModel(40, 32, n_layers=2, mixer=mixer, mixer_kwargs=kwargs, max_seq_len=32, dropout=0.0).double()
    ids = torch.randint(0, 40, (3, 32))
    positions = torch.tensor([[3, 7, 15, 31], [24, 25, 26, 27], [0, 1, 2, 9]])
    rows = []
    model.blocks[-1].mixer.get_submodule(projection).register_forward_hook(lambda m, args, out: rows.append(
        args[0].shape[:-1]))
    got = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, False)
    assert rows == [(3, 4)]
    want = logits_and_grads(model, lambda m, i, p: rows_at(m(i), p), ids, positions, False)
    assert rows[1:] == [(3, 32)] and len(got) == len(want) > 1
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("mixer, kwargs", [("softmax", {}), ("swa", {"window": 5}), ("gatedfwa", {"window": 5})])
def test_attention_from_the_labelled_rows_through_the_triton_kernels_follows_the_reference(monkeypatch, mixer,
                                                                                           kwargs):
    """The model's last block through ``attention_at_rows``' Triton kernels (interpreted, float32: q at the rows from
    ``head_parts``, k and v its strided views, GatedFWA's decay as a key bias) gives the logits and every gradient of
    its reference path (SDPA or the dense form with a mask)."""
    from zoo.kernels import attention as attention_op
    from zoo.mixers import attention as attention_mixers
    torch.manual_seed(0)
    model = LanguageModel(40, 32, n_layers=2, mixer=mixer, mixer_kwargs=kwargs, max_seq_len=32, dropout=0.0)
    ids = torch.randint(0, 40, (3, 32))
    positions = torch.tensor([[3, 7, 15, 31, 0], [24, 25, 26, 30, 31], [0, 1, 2, 9, 17]])
    want = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, False)
    assert backend.last_backend("attention_rows") == "naive"
    monkeypatch.setattr(attention_mixers, "attention_at_rows",
                        functools.partial(attention_op.attention_at_rows, backend="triton"))
    got = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, False)
    assert backend.last_backend("attention_rows") == "triton"
    assert len(got) == len(want) > 1
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))


def test_attention_dropout_applies_to_the_labelled_rows_queries():
    torch.manual_seed(0)
    model = LanguageModel(40, 32, n_layers=1, mixer="softmax", max_seq_len=32, dropout=0.5)
    ids, positions = torch.randint(0, 40, (2, 32)), torch.tensor([[5, 9], [30, 31]])
    trained = [model(ids, positions) for _ in range(2)]
    model.eval()
    assert not torch.equal(trained[0], trained[1]) and torch.equal(model(ids, positions), model(ids, positions))


@pytest.mark.gpu
@pytest.mark.parametrize("mixer, d_model, kwargs", [("softmax", 128, {}), ("swa", 128, {}), ("gatedfwa", 128, {}),
                                                    ("softmax", 512, {"num_heads": 1})])
def test_gpu_last_block_at_the_labelled_rows_follows_the_full_forward(picked, mixer, d_model, kwargs):
    """On a GPU under bf16 autocast (training's path: zoo's Triton attention from 16 of 256 queries, GatedFWA's with
    its decay as a key bias, the full forward's cuDNN or Triton attention; past head dim 256, one head of 512, the
    masked reference through zoo's dense attention), to bf16's rounding: logits and every parameter's gradient are as
    far from the float32 full forward as the bf16 full forward's are, at most twice (GatedFWA's gate bias gradient
    sums terms that cancel: under bf16 both forwards are off by tens of percent in the first layer, measured on a
    CPU)."""
    torch.manual_seed(0)
    model = LanguageModel(512, d_model, n_layers=2, mixer=mixer, mixer_kwargs=kwargs, max_seq_len=256,
                          dropout=0.0).cuda()
    ids = torch.randint(0, 512, (8, 256), device="cuda")
    positions = torch.sort(torch.rand(8, 256, device="cuda").argsort(1)[:, :16], 1).values
    exact = logits_and_grads(model, lambda m, i, p: rows_at(m(i), p), ids, positions, False)
    backend.clear()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, False)
        wide = d_model == 512  # the picked rows' call:
        assert backend.last_backend("attention_rows") == ("naive" if wide else "triton")
        assert backend.last_backend("attention") == ("dense" if wide else "sdpa" if mixer == "softmax" else None)
        want = logits_and_grads(model, lambda m, i, p: rows_at(m(i), p), ids, positions, False)
    assert picked == [256]
    assert_as_close_as_the_full_bf16_forward(got, want, exact)


def assert_as_close_as_the_full_bf16_forward(got, want, exact):
    """Each of ``got`` (the labelled rows' forward under bf16) at most twice as far from ``exact`` (the float32 full
    forward) as ``want`` (the full forward under bf16) is, plus 0.5% of its scale."""
    for a, b, e in zip(got, want, exact):
        a, b, e = a.float(), b.float(), e.float()
        scale = e.abs().max().item()
        assert (a - e).abs().max().item() <= 2 * (b - e).abs().max().item() + 5e-3 * scale


@pytest.mark.gpu
@pytest.mark.parametrize("mixer", ["mamba", "hyena", "rwkv", "rwkv7", "based"])
def test_gpu_recurrent_and_conv_mixers_at_the_labelled_rows_follow_the_full_forward(mixer):
    """On a GPU under bf16 autocast (the fast paths: Triton scan, gated long conv, WKV, linear attention, RWKV-7's
    chunks and compiled functions), their last projection (and Mamba's gate, RWKV-7's read-out) on 16 of 256 rows:
    logits and every gradient as far from the float32 full forward as the bf16 full forward's, at most twice."""
    torch.manual_seed(0)
    model = LanguageModel(512, 128, n_layers=2, mixer=mixer, max_seq_len=256, dropout=0.0).cuda()
    ids = torch.randint(0, 512, (8, 256), device="cuda")
    positions = torch.sort(torch.rand(8, 256, device="cuda").argsort(1)[:, :16], 1).values
    exact = logits_and_grads(model, lambda m, i, p: rows_at(m(i), p), ids, positions, False)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        backend.clear()
        got = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, False)
        assert backend.last_backend("linear") == "triton"  # the tied head, through zoo's linear on a GPU
        want = logits_and_grads(model, lambda m, i, p: rows_at(m(i), p), ids, positions, False)
    assert_as_close_as_the_full_bf16_forward(got, want, exact)


@pytest.mark.gpu
def test_gpu_zoology_block_takes_one_norm_op_each_and_follows_the_unfused_forward(monkeypatch):
    """Zoology's block (the "normed" state mixer) on a GPU under bf16 autocast: each norm2 and the norm after it are
    one Triton op (three norm ops in a 2-layer model: the first norm gathering the embedding, then two with a pre
    norm), and the logits and every gradient at the labelled rows are as close to the float32 unfused forward as the
    bf16 unfused forward's, at most twice."""
    from zoo.kernels.layer_norm import fused
    torch.manual_seed(0)
    model = LanguageModel(512, 128, n_layers=2, mixer="softmax", max_seq_len=256, dropout=0.0,
                          state_mixer="normed").cuda()
    ids = torch.randint(0, 512, (8, 256), device="cuda")
    positions = torch.sort(torch.rand(8, 256, device="cuda").argsort(1)[:, :16], 1).values
    exact = logits_and_grads(model, lambda m, i, p: rows_at(unfused_forward(m, i), p), ids, positions, False)
    calls = []
    apply = fused._Norm.apply
    monkeypatch.setattr(fused._Norm, "apply", lambda *args: calls.append(args[-1]) or apply(*args))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = logits_and_grads(model, lambda m, i, p: m(i, p), ids, positions, False)
        assert calls == [None, 1e-5, 1e-5]  # each call's pre_eps: the gathering norm, then norm1 and the final norm
        want = logits_and_grads(model, lambda m, i, p: rows_at(unfused_forward(m, i), p), ids, positions, False)
    assert_as_close_as_the_full_bf16_forward(got, want, exact)
