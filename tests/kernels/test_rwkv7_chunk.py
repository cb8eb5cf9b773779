"""RWKV-7's chunked Triton kernels (``zoo.kernels.rwkv7.chunk``) against the step-by-step recurrence in float64:
values and all six gradients, across chunk boundaries, padded K and V, decays at the bound; bit-reproducibility;
the dispatcher's choice and refusals; and on a GPU, tf32 and float32 matmuls at the model's head size (strided bf16
views: ``test_rwkv7_fused.py``, for both kernels)."""
import pytest
import torch

from zoo.kernels import backend
from zoo.kernels.rwkv7 import rwkv7
from zoo.kernels.bench import RWKV7_CHUNK_LAUNCHES, RWKV7_KERNEL_LAUNCHES, RWKV7_W_MIN
from zoo.kernels.rwkv7.chunk import CHUNK, LAUNCH, MAX_EXPONENT, Launch, check_launch, fits, rwkv7_chunk
from zoo.kernels.rwkv7.naive import rwkv7_naive, rwkv7_recurrence
from zoo.mixers.rwkv7 import W_SCALE

from test_rwkv7_fused import NAMES, assert_matches, grads, layer_inputs

W_LAYER = -W_SCALE  # the RWKV-7 layer's bound on its log decays
W_EDGE = -MAX_EXPONENT / CHUNK  # the lowest bound the kernels take


F32 = torch.float32  # the states the chains keep, in float32: the tests of the arithmetic hold them to 1e-4


def chunk_against_naive(shape, w_low, w_high, device="cpu", launch=Launch(precision="ieee", states_dtype=F32),
                        seed=0):
    """(the kernels' [o, grads] in float32, the recurrence's in float64 on the same values)."""
    xs = layer_inputs(*shape, w_low, w_high, device=device, seed=seed)
    do = torch.randn(*shape[:3], shape[4], generator=torch.Generator().manual_seed(seed + 1)).to(device)
    got = grads(lambda *x: rwkv7_chunk(*x, launch=launch), xs, do)
    xs64 = [t.detach().double().requires_grad_() for t in xs]
    return got, grads(rwkv7_recurrence, xs64, do.double())


# (B, L, H, K, V), w range: L = 19 and 40 cross chunks of 16 and end inside one; L = 5 one short chunk; L = 32
# whole chunks; K, V not powers of two (masked padding) and below 16 (the matmuls' least size); the decays at the
# layer's bound, at the kernels' lowest (every exponent up to MAX_EXPONENT), and weak
@pytest.mark.parametrize("shape, w_low, w_high", [
    ((2, 19, 2, 16, 32), W_LAYER, -0.01),
    ((1, 40, 1, 16, 16), W_EDGE, W_EDGE * 0.9),
    ((1, 32, 1, 16, 16), -1e-3, -1e-6),
    ((1, 5, 2, 16, 16), W_LAYER, -0.01),
    ((1, 23, 2, 6, 20), W_LAYER, -0.1),
], ids=["layer", "edge", "weak", "short", "padded"])
@pytest.mark.parametrize("block_v", [64, 16], ids=["one_block", "value_blocks"])
def test_chunks_match_naive(shape, w_low, w_high, block_v):
    """With 16 value columns a program, V = 32 and 20 take two programs a head in the chains through the
    chunks."""
    launch = Launch(block_v=block_v, precision="ieee", states_dtype=F32)
    got, want = chunk_against_naive(shape, w_low, w_high, launch=launch)
    assert got[0].dtype == torch.float32
    assert_matches(got, want, rtol=1e-4, atol=1e-4)


def test_key_blocks_match_naive():
    """The key side's gradients by blocks of 16 key columns: K = 40 pads to 64, so four programs a chunk, the third
    with 8 real columns and the fourth with none; V = 24 in two value blocks of the chains."""
    got, want = chunk_against_naive((2, 19, 2, 40, 24), W_LAYER, -0.01,
                                    launch=Launch(block_v=16, precision="ieee", grads_block_k=16, states_dtype=F32))
    assert_matches(got, want, rtol=1e-4, atol=1e-4)


def test_value_blocks_of_the_key_sides_gradients_match_naive():
    """The key side's gradients summing their products over V in blocks of 16 value columns: V = 40 pads to 64, so
    four blocks, the third with 8 real columns and the fourth with none; as one block of all 64 they are the same
    sums in another order."""
    shape = (2, 19, 2, 16, 40)
    launch = Launch(block_v=16, precision="ieee", grads_block_v=16, states_dtype=F32)
    got, want = chunk_against_naive(shape, W_LAYER, -0.01, launch=launch)
    assert_matches(got, want, rtol=1e-4, atol=1e-4)
    whole, _ = chunk_against_naive(shape, W_LAYER, -0.01, launch=launch._replace(grads_block_v=None))
    assert torch.equal(got[4], whole[4]) and torch.equal(got[0], whole[0])  # v's gradient and o: the chains'


def test_the_inverse_in_float32_matches_naive():
    """T's products as "ieee" rather than the default "tf32x3" (the interpreter computes both in float32): the
    launch reaches the kernel, whose result holds."""
    got, want = chunk_against_naive((2, 19, 2, 16, 32), W_LAYER, -0.01,
                                    launch=Launch(precision="ieee", inverse_precision="ieee", states_dtype=F32))
    assert_matches(got, want, rtol=1e-4, atol=1e-4)


def test_states_kept_in_bf16_round_only_the_key_sides_gradients():
    """``states_dtype=torch.bfloat16`` (the default) keeps each chunk's S_0, SA, dS_C and dY in bf16: o and dv are
    the float32 states' to the bit (the chains walk in float32 and round only what they store); the key side's
    gradients, made from the stored values, carry bf16's rounding (within 1e-2 of each one's largest value)."""
    assert LAUNCH.states_dtype == torch.bfloat16
    shape, launch = (2, 40, 2, 16, 32), Launch(precision="ieee", states_dtype=F32)
    exact, want = chunk_against_naive(shape, W_LAYER, -0.01, launch=launch)
    got, _ = chunk_against_naive(shape, W_LAYER, -0.01, launch=launch._replace(states_dtype=torch.bfloat16))
    for name, g, e, w in zip(NAMES, got, exact, want):
        if name in ("o", "v"):
            assert torch.equal(g, e), name
        else:
            assert not torch.equal(g, e), name
            assert (g.double() - w).abs().max() <= 1e-2 * w.abs().max(), name


def test_bf16_inputs_give_the_float32_math_rounded_once():
    """bf16 inputs (the layer's under autocast, its decays too, as fla's layer hands them over): o comes out in bf16,
    as fla's ``chunk_rwkv7`` returns it, and it and every gradient are the float32 inputs' results on the same
    values rounded once to bf16, within one bf16 step (the kernels load every input into float32 and round only what
    they store; the interpreter's rounding to bf16 is not always to the nearest value)."""
    xs = [x.detach().bfloat16() for x in layer_inputs(2, 19, 2, 16, 32, W_LAYER, -0.01)]
    do = torch.randn(2, 19, 2, 32).bfloat16()
    launch = Launch(precision="ieee")

    def run(dtype):
        return grads(lambda *x: rwkv7_chunk(*x, launch=launch), [x.to(dtype).detach().requires_grad_() for x in xs],
                     do.to(dtype))

    got, exact = run(torch.bfloat16), run(torch.float32)
    for name, g, e in zip(NAMES, got, exact):
        assert g.dtype == torch.bfloat16, name
        torch.testing.assert_close(g.float(), e, rtol=2 ** -7, atol=0, msg=lambda m: f"{name}: {m}")


def test_chunks_are_bit_reproducible():
    xs = layer_inputs(1, 20, 2, 16, 16, W_LAYER, -0.01)
    do = torch.randn(1, 20, 2, 16)
    first, second = (grads(rwkv7_chunk, xs, do) for _ in range(2))
    assert all(torch.equal(x, y) for x, y in zip(first, second))


def test_fits_only_bounded_decays_within_the_exponent():
    assert fits(W_LAYER) and fits(W_EDGE) and fits(-0.0)
    assert not fits(None) and not fits(W_EDGE * 1.01)


def test_rwkv7_dispatches_the_chunks_by_name_and_refuses_unbounded_decays():
    xs = layer_inputs(2, 20, 2, 16, 16, W_LAYER, -0.01)
    backend.clear()
    got = rwkv7(*xs, w_min=W_LAYER, backend="triton_chunk")
    assert backend.last_backend("rwkv7") == "triton_chunk"
    torch.testing.assert_close(got, rwkv7(*xs, backend="naive"), rtol=1e-4, atol=1e-4)
    for w_min in (None, -5.0):
        with pytest.raises(ValueError, match=f"triton_chunk.*got w_min={w_min}"):
            rwkv7(*xs, w_min=w_min, backend="triton_chunk")


@pytest.mark.parametrize("launch, match", [(Launch(precision="fp16"), "launch.precision 'fp16'"),
                                           (Launch(block_v=24), "launch.block_v 24"),
                                           (Launch(block_v=8), "launch.block_v 8"),
                                           (Launch(grads_block_k=8), "launch.grads_block_k 8"),
                                           (Launch(grads_block_v=48), "launch.grads_block_v 48"),
                                           (Launch(64, "tf32"), "launch.num_warps 'tf32'"),
                                           (Launch(inverse_precision="tf32"), "launch.inverse_precision 'tf32'"),
                                           (Launch(grads_warps=3), "launch.grads_warps 3"),
                                           (Launch(intra_warps=0), "launch.intra_warps 0"),
                                           (Launch(states_dtype=torch.float16),
                                            "launch.states_dtype=torch.float16 is not valid")])
def test_launch_is_checked(launch, match):
    with pytest.raises(ValueError, match=match):
        rwkv7_chunk(*layer_inputs(1, 4, 1, 16, 16, W_LAYER, -0.01), launch=launch)


def test_the_kernel_bench_times_valid_launches_at_the_layers_bound():
    for launch in RWKV7_CHUNK_LAUNCHES:
        check_launch(launch)
    assert RWKV7_W_MIN == W_LAYER and fits(RWKV7_W_MIN)
    for kernel, launches in RWKV7_KERNEL_LAUNCHES.items():  # each kernel alone: the default among its rows
        for launch in launches:
            check_launch(launch)
        assert LAUNCH in launches, kernel


def assert_within(got, want, tol, what):
    """Each tensor of ``got`` within ``tol`` of the largest |value| of its counterpart in ``want``."""
    for name, g, w in zip(NAMES, got, want):
        scale = w.abs().max().item()
        err = (g - w).abs().max().item()
        assert err <= tol * scale, f"{name}: max error {err} against max |value| {scale} ({what})"


@pytest.mark.gpu
@pytest.mark.parametrize("precision, tol", [("ieee", 2e-3), ("tf32", 1e-2)])
@pytest.mark.parametrize("block_v", [64, 16])
@pytest.mark.parametrize("shape", [(3, 130, 2, 64, 64), (2, 77, 3, 32, 64)])
def test_chunks_match_naive_on_gpu(shape, block_v, precision, tol):
    """float32 inputs on the GPU at the model's head size, against the step-by-step recurrence (float32), float32
    states kept; tf32 matmuls within a relative 1e-2 of each tensor's largest value."""
    xs = layer_inputs(*shape, w_low=W_LAYER, w_high=-1e-4, device="cuda")
    do = torch.randn(*shape[:3], shape[4], device="cuda")
    launch = Launch(block_v=block_v, precision=precision, states_dtype=F32)
    got = grads(lambda *x: rwkv7_chunk(*x, launch=launch), xs, do)
    assert_within(got, grads(rwkv7_naive, xs, do), tol, precision)


@pytest.mark.gpu
@pytest.mark.parametrize("launch", [
    LAUNCH, Launch(inverse_precision="ieee", intra_warps=4), Launch(num_warps=4, intra_warps=None, grads_warps=None),
    Launch(num_warps=8, intra_warps=8, grads_warps=8), Launch(num_warps=1, intra_warps=2, grads_warps=2),
    Launch(grads_block_k=16), Launch(grads_block_k=64, grads_warps=8), Launch(states_dtype=F32),
    Launch(grads_block_v=16), Launch(grads_block_v=None), Launch(grads_block_k=32, grads_warps=2)], ids=str)
def test_each_launch_matches_naive_on_gpu(launch):
    """The dispatcher's launch and others (each kernel's warps, T by three tf32 products, float32 states) at the
    model's head size, within tf32's tolerance of the float32 recurrence."""
    xs = layer_inputs(3, 130, 2, 64, 64, w_low=W_LAYER, w_high=-1e-4, device="cuda")
    do = torch.randn(3, 130, 2, 64, device="cuda")
    got = grads(lambda *x: rwkv7_chunk(*x, launch=launch), xs, do)
    assert_within(got, grads(rwkv7_naive, xs, do), 1e-2, launch)
