"""``zoo.kernels.rows``: ``rows_at`` gathers [B, K] rows of a [B, L, ...] tensor; its gradient puts them back, summing
repeated positions. Against PyTorch's gather (whose gradient is ``scatter_add``); the one-hot matmul that takes the
gradient of 16-bit rows on a GPU also on the CPU, and on the GPU with the matmul seen to run."""
import pytest
import torch

from zoo.kernels import rows
from zoo.kernels.rows import ONE_HOT_ROWS, rows_at, rows_back_by_matmul

# sequence 0 repeats position 0 (a padded row beside a labelled one), sequence 1 does not
POSITIONS = [[3, 0, 7, 0], [5, 1, 2, 6]]


def _reference(x, positions):
    index = positions.view(*positions.shape, *(1,) * (x.dim() - 2)).expand(*positions.shape, *x.shape[2:])
    return x.gather(1, index)


def _values_and_grads(fn, x, positions, g):
    x = x.detach().requires_grad_()
    y = fn(x, positions)
    y.backward(g)
    return y, x.grad


@pytest.mark.parametrize("shape", [(2, 8), (2, 8, 5), (2, 8, 3, 4)])
def test_rows_at_matches_the_gather_and_its_gradient(shape):
    gen = torch.Generator().manual_seed(len(shape))
    x, positions = torch.randn(*shape, generator=gen), torch.tensor(POSITIONS)
    g = torch.randn(2, 4, *shape[2:], generator=gen)
    got, want = _values_and_grads(rows_at, x, positions, g), _values_and_grads(_reference, x, positions, g)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_one_hot_gradient_puts_rows_back_and_sums_repeats(dtype):
    """Each row at a position that occurs once comes back with the same bits, the rest of the tensor is zero, and a
    repeated position holds the sum of its rows (rounded once)."""
    positions = torch.tensor(POSITIONS)
    g = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(0)).to(dtype)
    got = rows_back_by_matmul(g, positions, torch.Size((2, 8, 6)))
    assert got.dtype == dtype and got.shape == (2, 8, 6)
    assert torch.equal(got[0, 3], g[0, 0]) and torch.equal(got[0, 7], g[0, 2])
    assert torch.equal(got[0, 0], (g[0, 1].float() + g[0, 3].float()).to(dtype))
    assert torch.equal(got[1, [5, 1, 2, 6]], g[1])
    untouched = torch.ones(2, 8, dtype=torch.bool)
    untouched[0, [0, 3, 7]] = untouched[1, [1, 2, 5, 6]] = False
    assert not got[untouched].any()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype, K, by_matmul", [(torch.bfloat16, 64, True), (torch.float16, 16, True),
                                                 (torch.bfloat16, ONE_HOT_ROWS + 1, False),
                                                 (torch.float32, 16, False)])
def test_gpu_rows_at_gradient_by_matmul_in_16_bits(monkeypatch, dtype, K, by_matmul):
    """The grid's largest cell's shape ([128, 512, 1024], 64 rows): 16-bit gradients of up to ``ONE_HOT_ROWS`` rows go
    through the matmul (counted), others through the scatter; both equal the gather's gradient, repeats included."""
    calls = []
    matmul = rows.rows_back_by_matmul
    monkeypatch.setattr(rows, "rows_back_by_matmul", lambda *a: calls.append(1) or matmul(*a))
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(128, 512, 1024, device="cuda", generator=gen).to(dtype)
    positions = torch.sort(torch.rand(128, 512, device="cuda", generator=gen).argsort(1)[:, :K], 1).values
    positions[:, -1] = positions[:, 0]  # a repeated position in every sequence
    g = torch.randn(128, K, 1024, device="cuda", generator=gen).to(dtype)
    got, want = _values_and_grads(rows_at, x, positions, g), _values_and_grads(_reference, x, positions, g)
    assert len(calls) == by_matmul
    assert torch.equal(got[0], want[0])
    # scatter_add sums a repeat in 16 bits (in an order the atomics choose), the matmul in float32 rounded once
    torch.testing.assert_close(got[1].float(), want[1].float(), rtol=1e-2, atol=1e-2)
    once = torch.ones_like(positions, dtype=torch.bool)
    once[:, 0] = once[:, -1] = False
    b = torch.arange(128, device="cuda")[:, None].expand_as(positions)
    assert torch.equal(got[1][b[once], positions[once]], g[once])
