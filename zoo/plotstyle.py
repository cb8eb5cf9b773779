"""One colour per mixer, the same in every figure zoo draws.

Built-in mixers have fixed colours; any other name gets one from a second palette by a stable hash of
the name (not by its position in a figure's legend), so a mixer keeps its colour across figures.
"""
from __future__ import annotations

import zlib

FIXED = {
    "softmax": "#1f77b4", "swa": "#ff7f0e", "gatedfwa": "#d62728", "based": "#2ca02c", "hyena": "#9467bd",
    "rwkv": "#8c564b", "rwkv7": "#e377c2", "mamba": "#7f7f7f", "mamba2": "#bcbd22", "gla": "#17becf",
    "deltanet": "#393b79", "gated_deltanet": "#637939", "retnet": "#8c6d31", "hgrn2": "#843c39",
}
OTHERS = ["#5254a3", "#8ca252", "#bd9e39", "#ad494a", "#a55194", "#6b6ecf", "#b5cf6b", "#e7ba52", "#d6616b",
          "#ce6dbd", "#9c9ede", "#cedb9c", "#e7cb94", "#e7969c", "#de9ed6"]


def mixer_colour(name: str) -> str:
    """The matplotlib colour of mixer ``name``."""
    return FIXED.get(name) or OTHERS[zlib.crc32(name.encode()) % len(OTHERS)]
