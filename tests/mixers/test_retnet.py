"""RetNet: rotary positions make q.k depend on the offset only (the decays: tests/kernels/test_retention.py)."""
import torch

from zoo.mixers.retnet import MultiScaleRetention, rotary


def test_rotary_scores_depend_on_offset_only():
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 2, 8).expand(1, 12, 2, 8), torch.randn(1, 1, 2, 8).expand(1, 12, 2, 8)
    scores = torch.einsum("bthk,bshk->bhts", rotary(q), rotary(k))[0]
    for offset in range(-5, 6):
        band = scores.diagonal(offset, dim1=-2, dim2=-1)
        torch.testing.assert_close(band, band[..., :1].expand_as(band), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rotary(q)[:, 0], q[:, 0])  # position 0 is not rotated


def test_head_sizes_follow_fla_defaults():
    layer = MultiScaleRetention(64)
    assert (layer.num_heads, layer.key_dim, layer.value_dim) == (8, 64, 128)
