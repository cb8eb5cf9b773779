"""The Mamba block's defaults follow the paper."""
import math

from zoo.mixers.mamba import Mamba


def test_paper_defaults():
    m = Mamba(100)
    assert (m.d_inner, m.d_state, m.conv.kernel_size, m.dt_rank) == (200, 16, 4, math.ceil(100 / 16))
