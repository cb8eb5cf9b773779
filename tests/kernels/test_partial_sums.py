"""``zoo.kernels.partial_sums`` (interpreted on CPU): ``sum_rows``, the sum over the rows of [..., P, N] float32
partial sums, and ``sum_first``, over the first dim, against ``torch.sum`` in float64, at row and column counts off
the kernel's tile sizes; the same bits on a second call; empty inputs; a non-float32 input refused. ``sum_blocks``:
a lone block returned as it is (or cast), several summed in order into the dtype asked for."""
import pytest
import torch

from zoo.kernels.partial_sums import MAX_BLOCK_N, SUM_BLOCKS_BLOCK, TILE, sum_blocks, sum_first, sum_rows


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (33, 64), (TILE // MAX_BLOCK_N + 1, MAX_BLOCK_N + 3),
                                   (2, 7, 130), (2, 3, 5, 9)])
def test_sum_rows_matches_torch(shape):
    partial = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    got = sum_rows(partial)
    assert got.dtype == torch.float32 and got.shape == shape[:-2] + shape[-1:]
    torch.testing.assert_close(got.double(), partial.double().sum(-2), rtol=1e-5, atol=1e-5)
    assert torch.equal(sum_rows(partial), got)


def test_sum_rows_reads_a_non_contiguous_view():
    wide = torch.randn(2, 40, 30)
    view = wide.transpose(0, 1)[:, :, 3:20].transpose(0, 1)  # [2, 40, 17], strided
    torch.testing.assert_close(sum_rows(view), view.sum(-2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(5, 3), (7, 4, 6), (3, 2, 5, 9)])
def test_sum_first_sums_the_first_dim(shape):
    partial = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    got = sum_first(partial)
    assert got.shape == shape[1:]
    torch.testing.assert_close(got.double(), partial.double().sum(0), rtol=1e-5, atol=1e-5)


def test_empty_inputs_sum_to_zeros():
    assert torch.equal(sum_rows(torch.empty(0, 4)), torch.zeros(4))
    assert torch.equal(sum_rows(torch.empty(2, 0, 3)), torch.zeros(2, 3))
    assert sum_rows(torch.empty(3, 0)).shape == (0,)


def test_sum_rows_refuses_other_dtypes():
    with pytest.raises(TypeError, match="float32"):
        sum_rows(torch.zeros(2, 2, dtype=torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_sum_rows_at_the_shapes_of_the_training_step():
    for shape in [(176, 384), (176, 128), (2, 528, 128), (3, 1000, 513)]:
        partial = torch.randn(*shape, device="cuda")
        got = sum_rows(partial)
        torch.testing.assert_close(got.double(), partial.double().sum(-2), rtol=1e-5, atol=1e-4)
        assert torch.equal(sum_rows(partial), got)


def test_sum_blocks_returns_a_lone_block_itself_and_sums_several():
    one = torch.randn(1, 3, 4, dtype=torch.bfloat16)
    assert sum_blocks(one).data_ptr() == one.data_ptr() and torch.equal(sum_blocks(one), one[0])
    assert sum_blocks(one, torch.float32).dtype == torch.float32 and torch.equal(sum_blocks(one, torch.float32),
                                                                                 one[0].float())
    several = torch.randn(3, 5, 2)
    torch.testing.assert_close(sum_blocks(several), several[0] + several[1] + several[2])


# bf16 on the GPU only: Triton's interpreter rounds float32 to bf16 by truncation (up to one unit in the last place)
@pytest.mark.parametrize("device, dtype", [("cpu", torch.float32), ("cpu", torch.float16),
                                           pytest.param("cuda", torch.bfloat16, marks=pytest.mark.gpu)])
def test_sum_blocks_adds_the_blocks_in_order_into_the_dtype_asked_for(device, dtype):
    """Values past one program's block (masked tail), four blocks added first to last in float32, then rounded once
    to ``dtype``: the same bits as that sum in PyTorch, and on a second call."""
    partial = torch.randn(4, 3, SUM_BLOCKS_BLOCK // 3 + 5, generator=torch.Generator().manual_seed(1)).to(device)
    got = sum_blocks(partial, dtype)
    assert got.dtype == dtype and got.shape == partial.shape[1:]
    assert torch.equal(got, (((partial[0] + partial[1]) + partial[2]) + partial[3]).to(dtype))
    assert torch.equal(sum_blocks(partial, dtype), got)
    assert sum_blocks(torch.zeros(2, 0, 3, device=device), dtype).shape == (0, 3)
