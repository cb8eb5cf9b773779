"""Memory layout helpers shared by zoo's Triton kernels."""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl


def last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    """x itself when its last dim has stride 1 (the kernels' vector loads need it), else a contiguous copy."""
    return x if x.stride(-1) == 1 else x.contiguous()


def packed_base(parts) -> torch.Tensor | None:
    """The contiguous [B, L, P, heads, Dh] tensor whose ``unbind(2)`` the P ``parts`` [B, L, heads, Dh] are (views of
    it, in order: attention's q, k, v as one projection's output), or None when they are anything else."""
    first = parts[0]
    if first is None or first.dim() != 4:
        return None
    B, L, heads, head_dim = first.shape
    width, n = heads * head_dim, len(parts)
    strides = (L * n * width, n * width, head_dim, 1)
    for i, part in enumerate(parts):
        if (part is None or part.shape != first.shape or part.dtype != first.dtype or part.stride() != strides
                or part.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
                or part.storage_offset() != first.storage_offset() + i * width):
            return None
    return first.as_strided((B, L, n, heads, head_dim), (L * n * width, n * width, width, head_dim, 1))


def channel_block(asked: int | None, sequences: int, channels: int, blocks: tuple[int, ...], min_programs: int) -> int:
    """Channels per program of a walk that gives each program one sequence and a block of channels: ``asked``, or
    the first (widest) of ``blocks`` that still leaves ``min_programs`` programs, else the last; never wider than
    ``channels`` rounded up to a power of two."""
    block = asked
    if block is None:
        block = next((b for b in blocks[:-1] if sequences * triton.cdiv(channels, b) >= min_programs), blocks[-1])
    return min(triton.next_power_of_2(channels), block)


def even_walks(tiles: int, programs: int) -> tuple[int, int]:
    """(tiles each program walks, programs) for ``tiles`` tiles split between at most ``programs`` programs (at
    least one) as evenly as the tiles allow, none left without a tile (so every program's partial row is written)."""
    per_program = triton.cdiv(tiles, min(tiles, max(1, programs)))
    return per_program, triton.cdiv(tiles, per_program)


@functools.cache
def resident_programs(device: torch.device, per_sm: int = 4) -> int:
    """How many programs a kernel that walks its rows in a fixed number of programs launches: ``per_sm`` per SM on a
    GPU (4: enough to hide memory latency); 2 under the interpreter, which runs programs one after another (tests then
    still split the rows between programs)."""
    if device.type != "cuda":
        return 2
    return per_sm * torch.cuda.get_device_properties(device).multi_processor_count


@triton.jit
def sequence_tile(BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    """(times t [BLOCK_T], channels c [BLOCK_C], sequence b as int64) of a program on a (time tiles, channel tiles,
    sequences) grid: time tiles on axis 0, so programs launched together share the rows at their borders in the
    cache."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    return t, c, tl.program_id(2).to(tl.int64)


@triton.jit
def time_tile(P, t, c, c_ok, T, s_t, s_c):
    """P[t, c] of one sequence with any strides, float32 [BLOCK_T, BLOCK_C]: zero at times outside [0, T) (a causal
    filter's padding before t = 0, a tile's part past the end) and where ``c_ok`` is False."""
    ok = ((t >= 0) & (t < T))[:, None] & c_ok[None, :]
    return tl.load(P + t[:, None] * s_t + c[None, :] * s_c, mask=ok, other=0.0).to(tl.float32)
