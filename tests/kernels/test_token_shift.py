"""The Triton token-shift mix against the F.pad + addcmul reference: outputs and all gradients for RWKV-4's three
and RWKV-7's six mixes, strided inputs, outputs without a gradient, an output dtype, run-to-run bit equality of the
mixes' gradient, backend choice and bad inputs; on a GPU, bf16 under autocast, and a CUDA-graph replay."""
import functools
import re

import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.token_shift import fused, token_shift_mix
from zoo.kernels.token_shift.naive import token_shift_mix_naive
from graph_capture import assert_replays_like_eager

B, T, D = 2, 11, 13
SMALL_TILES = dict(block_t=4, block_d=8)  # T and D are no multiples: partial tiles, t - 1 and t + 1 across borders


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def inputs(G, x=None):
    """(x [B, T, D], mixes [G, D] in [0, 1)), leaves that need gradients."""
    x = torch.randn(B, T, D) if x is None else x
    return x.requires_grad_(), torch.rand(G, D).requires_grad_()


def outputs_and_grads(run, x, mixes, dys, **kwargs):
    """(*outputs, dx, dmixes) of ``run``; ``dys`` holds one gradient per output, None for an output left out of
    the loss."""
    ys = run(x, mixes, **kwargs)
    used = [(y, dy) for y, dy in zip(ys, dys) if dy is not None]
    return (*ys, *torch.autograd.grad([y for y, _ in used], (x, mixes), [dy for _, dy in used]))


def assert_matches_reference(x, mixes, dys=None, tiles=SMALL_TILES):
    dys = [torch.randn(x.shape) for _ in mixes] if dys is None else dys
    got = outputs_and_grads(functools.partial(fused.token_shift_mix, **tiles), x, mixes, dys)
    want = outputs_and_grads(token_shift_mix_naive, x, mixes, dys)
    assert all(y.is_contiguous() and y.dtype == x.dtype for y in got[:len(mixes)])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("G", [1, 3, 6])
@pytest.mark.parametrize("block_t", [1, 2, 4, 16])
def test_matches_reference(G, block_t):
    """T = 11 is no multiple of any tile; with tiles of 1 to 4 times every x_prev (forward) and dy[t + 1] (backward)
    read crosses tile borders, with 16 one tile holds the whole sequence and more."""
    assert_matches_reference(*inputs(G), tiles=dict(block_t=block_t, block_d=8))


@pytest.mark.parametrize("min_programs", [1, 2 * 2, 3 * 2])
def test_backward_programs_walking_several_time_tiles(monkeypatch, min_programs):
    """With fewer programs wanted, each backward program walks several of the 3 time tiles (B = 2 sequences, one
    channel tile): all 3, then 2 and 1 (uneven), then 1 each. The same dx, and dm up to its summation order."""
    monkeypatch.setattr(fused, "MIN_PROGRAMS", min_programs)
    x = torch.randn(B, T, D)
    assert fused._walks(x, 4, 16)[0] == {1: 3, 4: 2, 6: 1}[min_programs]
    G, tiles = 3, dict(block_t=4, block_d=16)
    x, mixes = inputs(G, x)
    dys = [torch.randn(x.shape) for _ in range(G)]
    got = outputs_and_grads(functools.partial(fused.token_shift_mix, **tiles), x, mixes, dys)
    monkeypatch.setattr(fused, "MIN_PROGRAMS", 10 ** 6)  # one tile a program
    want = outputs_and_grads(functools.partial(fused.token_shift_mix, **tiles), x, mixes, dys)
    assert torch.equal(got[G], want[G])
    torch.testing.assert_close(got[G + 1], want[G + 1], rtol=1e-6, atol=1e-6)
    for g, w in zip(got, outputs_and_grads(token_shift_mix_naive, x, mixes, dys)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["chunk of a wider projection", "channel-first storage"])
def test_strided_input_and_output_gradients(layout):
    """x read where it lies (time stride 3D), or copied once where its channels are not contiguous; the output
    gradients are non-contiguous views too."""
    if layout == "chunk of a wider projection":
        x = torch.randn(B, T, 3 * D)[..., D:2 * D]
    else:
        x = torch.randn(B, D, T).transpose(1, 2)
    assert_matches_reference(*inputs(3, x), [torch.randn(B, D, T).transpose(1, 2) for _ in range(3)])


@pytest.mark.parametrize("unused", [[0], [1, 2], [0, 4, 5]])
def test_outputs_without_a_gradient_add_nothing(unused):
    """Autograd hands the backward None for an output outside the loss: it adds nothing to dx, its mix gets 0."""
    x, mixes = inputs(6)
    dys = [None if g in unused else torch.randn(B, T, D) for g in range(6)]
    assert_matches_reference(x, mixes, dys)
    dmixes = outputs_and_grads(functools.partial(fused.token_shift_mix, **SMALL_TILES), x, mixes, dys)[-1]
    assert (dmixes[unused] == 0).all()


def test_length_one_sequence():
    """x_prev is all zeros and nothing reaches t + 1."""
    assert_matches_reference(*inputs(3, torch.randn(B, 1, D)))


def test_out_dtype_bf16_rounds_the_float32_mix_once():
    """Outputs in bf16 (as the bf16 matmuls they feed under autocast would cast them), x's gradient in float32 and the
    mixes' in float32. The interpreter truncates float32 to bf16 rather than rounding it, so within one bf16 step."""
    x, mixes = inputs(3)
    dys = [torch.randn(B, T, D).bfloat16() for _ in range(3)]
    got = outputs_and_grads(functools.partial(fused.token_shift_mix, **SMALL_TILES), x, mixes, dys,
                            out_dtype=torch.bfloat16)
    want = outputs_and_grads(token_shift_mix_naive, x, mixes, [dy.float() for dy in dys])
    assert [t.dtype for t in got] == [torch.bfloat16] * 3 + [torch.float32] * 2
    for g, w in zip(got[:3], want[:3]):
        torch.testing.assert_close(g.float(), w, rtol=2 ** -7, atol=1e-5)
    for g, w in zip(got[3:], want[3:]):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    naive = token_shift_mix_naive(x, mixes, out_dtype=torch.bfloat16)
    assert [y.dtype for y in naive] == [torch.bfloat16] * 3


def test_entry_runs_triton_when_named_and_mixes_gradient_repeats_bitwise():
    x, mixes = inputs(6)
    dys = [torch.randn(B, T, D) for _ in range(6)]

    def grads():
        backend.clear()
        got = outputs_and_grads(functools.partial(token_shift_mix, backend="triton"), x, mixes, dys)
        assert backend.last_backend("token_shift_mix") == "triton"
        return got

    first = grads()
    for g, w in zip(first, outputs_and_grads(token_shift_mix_naive, x, mixes, dys)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert torch.equal(first[-1], grads()[-1])


def test_auto_is_the_reference_on_cpu_and_bad_arguments_raise():
    x, mixes = inputs(3)
    for got, want in zip(token_shift_mix(x, mixes), token_shift_mix_naive(x, mixes)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert backend.last_backend("token_shift_mix") == "naive"
    with pytest.raises(ValueError, match="backend='cuda'.*auto, triton, naive"):
        token_shift_mix(x, mixes, backend="cuda")
    for bad_x, bad_mixes in ((x, mixes[:, :-1]), (x, mixes[0]), (x[0], mixes)):
        with pytest.raises(ValueError, match=re.escape(f"x {tuple(bad_x.shape)} and mixes {tuple(bad_mixes.shape)}")):
            token_shift_mix(bad_x, bad_mixes, backend="naive")
    with pytest.raises(ValueError, match=r"mixes \(7, 13\).*1 to 6 mixes"):
        token_shift_mix(x, torch.rand(7, D), backend="triton")


GPU_SHAPE = (256, 256, 128)  # batch, length, channels: RWKV-4's MQAR training step


@pytest.mark.gpu
@pytest.mark.parametrize("G", [3, 6])
def test_gpu_bf16_under_autocast_matches_float32_reference(G):
    """Training's shapes and dtypes: float32 x (the norm's output) and mixes, bf16 outputs and output gradients."""
    Bg, Tg, Dg = GPU_SHAPE
    x = torch.randn(Bg, Tg, 3 * Dg, device="cuda")[..., Dg:2 * Dg].requires_grad_()  # a strided chunk
    mixes = torch.rand(G, Dg, device="cuda", requires_grad=True)
    dys = [torch.randn(Bg, Tg, Dg, device="cuda").bfloat16() for _ in range(G)]
    backend.clear()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = outputs_and_grads(token_shift_mix, x, mixes, dys, out_dtype=torch.bfloat16)
    assert backend.last_backend("token_shift_mix") == "triton"
    want = outputs_and_grads(token_shift_mix_naive, x, mixes, [dy.float() for dy in dys])
    for g, w in zip(got[:G], want[:G]):  # one bf16 rounding of a float32 result
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), w, rtol=1e-2, atol=1e-2)
    assert got[G].dtype == got[G + 1].dtype == torch.float32
    torch.testing.assert_close(got[G], want[G], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[G + 1], want[G + 1], rtol=1e-4, atol=1e-2)  # sums over B * T = 65536 terms


@pytest.mark.gpu
def test_gpu_forward_and_backward_are_captured_by_a_cuda_graph():
    """No host sync: forward and backward replay from a graph, with the same bits as eagerly."""
    Bg, Tg, Dg = GPU_SHAPE
    x = torch.randn(Bg, Tg, Dg, device="cuda", requires_grad=True)
    mixes = torch.rand(3, Dg, device="cuda", requires_grad=True)
    dys = [torch.randn(Bg, Tg, Dg, device="cuda").bfloat16() for _ in range(3)]

    def step():  # outputs detached: a kept autograd graph would tie the leaves' AccumulateGrad to the eager stream
        *ys, dx, dmixes = outputs_and_grads(token_shift_mix, x, mixes, dys, out_dtype=torch.bfloat16)
        return torch.stack(ys).detach(), dx, dmixes

    assert_replays_like_eager(step, x)
