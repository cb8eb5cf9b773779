"""Triton kernels for the GatedFWA preprocessing scan (Algorithm 1) and its reverse-scan backward.

``u_t = -sum_{s<=t} a_s`` with ``a_s = softplus(beta_s * h_s) / (beta_s + eps)`` along the time axis
of (B, T, H) tensors. The time axis is cut into chunks, one program per (chunk, batch, head block):

* pass 1 (only when there is more than one chunk) sums ``a`` over each chunk, and a cumsum over the
  (B, H, n_chunks) totals gives each chunk its carry;
* pass 2 starts from its carry and scans its chunk tile by tile (``[BLOCK_T, BLOCK_H]`` tiles,
  coalesced along the contiguous head axis, ``tl.cumsum`` along time) and writes ``u``.

``h`` and ``beta`` are read once per pass and ``u`` written once; ``a`` never goes to memory.
The backward is the same two passes run backwards in time on ``du``, ending in ``dh`` and ``dbeta``.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from zoo.kernels.backend import not_compiled
from zoo.kernels.layout import last_dim_contiguous
from zoo.kernels.stable import sigmoid_of

TILE_ELEMS = 4096  # elements of one [BLOCK_T, BLOCK_H] tile
TARGET_PROGRAMS = 2048  # enough chunks in flight to fill a GPU's memory pipes


@triton.jit
def _softplus_and_sigmoid(x):
    """softplus(x) and sigmoid(x) in fp32 without overflow, accurate for very negative x."""
    e = tl.exp(-tl.abs(x))  # in (0, 1]
    log1p_e = tl.where(e < 1e-4, e * (1.0 - 0.5 * e), tl.log(1.0 + e))
    softplus = tl.maximum(x, 0.0) + log1p_e
    return softplus, sigmoid_of(x, e)


@triton.jit
def _chunk_totals(h_ptr, beta_ptr, du_ptr, tot_ptr, T, H, eps,
                  s_hb, s_ht, s_bb, s_bt, s_db, s_dt, s_tb, s_tc, s_th,
                  CHUNK: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr,
                  FORWARD: tl.constexpr):
    """tot[b, c, h] = sum over chunk c of a (FORWARD) or of du (backward)."""
    pid_c, pid_b, pid_h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    acc = tl.zeros([BLOCK_T, BLOCK_H], dtype=tl.float32)
    for t0 in range(pid_c * CHUNK, pid_c * CHUNK + CHUNK, BLOCK_T):
        offs_t = t0 + tl.arange(0, BLOCK_T)
        mask = (offs_t[:, None] < T) & (offs_h[None, :] < H)
        if FORWARD:
            h = tl.load(h_ptr + pid_b * s_hb + offs_t[:, None] * s_ht + offs_h[None, :], mask=mask, other=0.0)
            beta = tl.load(beta_ptr + pid_b * s_bb + offs_t[:, None] * s_bt + offs_h[None, :], mask=mask,
                           other=1.0)
            softplus, _ = _softplus_and_sigmoid(beta.to(tl.float32) * h.to(tl.float32))
            acc += tl.where(mask, softplus / (beta.to(tl.float32) + eps), 0.0)
        else:
            acc += tl.load(du_ptr + pid_b * s_db + offs_t[:, None] * s_dt + offs_h[None, :], mask=mask, other=0.0)
    tl.store(tot_ptr + pid_b * s_tb + pid_c * s_tc + offs_h * s_th, tl.sum(acc, 0), mask=offs_h < H)


@triton.jit
def _scan_fwd(h_ptr, beta_ptr, u_ptr, carry_ptr, T, H, eps,
              s_hb, s_ht, s_bb, s_bt, s_ub, s_ut, s_cb, s_cc, s_ch,
              CHUNK: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, HAS_CARRY: tl.constexpr):
    """u = -(carry + running sum of a) over one chunk; carry[b, h, c] sums a over the earlier chunks."""
    pid_c, pid_b, pid_h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    carry = tl.zeros([BLOCK_H], dtype=tl.float32)
    if HAS_CARRY:
        carry += tl.load(carry_ptr + pid_b * s_cb + pid_c * s_cc + offs_h * s_ch, mask=offs_h < H, other=0.0)
    for t0 in range(pid_c * CHUNK, pid_c * CHUNK + CHUNK, BLOCK_T):
        offs_t = t0 + tl.arange(0, BLOCK_T)
        mask = (offs_t[:, None] < T) & (offs_h[None, :] < H)
        h = tl.load(h_ptr + pid_b * s_hb + offs_t[:, None] * s_ht + offs_h[None, :], mask=mask, other=0.0)
        beta = tl.load(beta_ptr + pid_b * s_bb + offs_t[:, None] * s_bt + offs_h[None, :], mask=mask, other=1.0)
        softplus, _ = _softplus_and_sigmoid(beta.to(tl.float32) * h.to(tl.float32))
        a = tl.where(mask, softplus / (beta.to(tl.float32) + eps), 0.0)
        u = -(carry[None, :] + tl.cumsum(a, 0))
        tl.store(u_ptr + pid_b * s_ub + offs_t[:, None] * s_ut + offs_h[None, :], u, mask=mask)
        carry += tl.sum(a, 0)


@triton.jit
def _scan_bwd(h_ptr, beta_ptr, du_ptr, dh_ptr, dbeta_ptr, carry_ptr, T, H, eps,
              s_hb, s_ht, s_bb, s_bt, s_db, s_dt, s_gb, s_gt, s_cb, s_cc, s_ch,
              CHUNK: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, HAS_CARRY: tl.constexpr):
    """da_s = -sum_{t>=s} du_t by a reverse scan, then the chain rule through a = softplus(beta h)/(beta+eps).

    carry[b, h, c] sums du over the later chunks.
    """
    pid_c, pid_b, pid_h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    carry = tl.zeros([BLOCK_H], dtype=tl.float32)
    if HAS_CARRY:
        carry += tl.load(carry_ptr + pid_b * s_cb + pid_c * s_cc + offs_h * s_ch, mask=offs_h < H, other=0.0)
    n_tiles = CHUNK // BLOCK_T
    for i in range(n_tiles):
        offs_t = pid_c * CHUNK + (n_tiles - 1 - i) * BLOCK_T + tl.arange(0, BLOCK_T)
        mask = (offs_t[:, None] < T) & (offs_h[None, :] < H)
        du = tl.load(du_ptr + pid_b * s_db + offs_t[:, None] * s_dt + offs_h[None, :], mask=mask, other=0.0)
        tile_sum = tl.sum(du, 0)
        da = -(carry[None, :] + tile_sum[None, :] - tl.cumsum(du, 0) + du)
        carry += tile_sum
        h = tl.load(h_ptr + pid_b * s_hb + offs_t[:, None] * s_ht + offs_h[None, :], mask=mask, other=0.0)
        beta = tl.load(beta_ptr + pid_b * s_bb + offs_t[:, None] * s_bt + offs_h[None, :], mask=mask, other=1.0)
        h32, beta32 = h.to(tl.float32), beta.to(tl.float32)
        softplus, sigmoid = _softplus_and_sigmoid(beta32 * h32)
        inv = 1.0 / (beta32 + eps)
        dh = da * sigmoid * beta32 * inv
        dbeta = da * (sigmoid * h32 - softplus * inv) * inv
        tl.store(dh_ptr + pid_b * s_gb + offs_t[:, None] * s_gt + offs_h[None, :], dh.to(h.dtype), mask=mask)
        tl.store(dbeta_ptr + pid_b * s_gb + offs_t[:, None] * s_gt + offs_h[None, :], dbeta.to(beta.dtype),
                 mask=mask)


def _layout(T: int, B: int, H: int):
    """Tile and chunk sizes: (BLOCK_T, BLOCK_H, CHUNK, n_chunks)."""
    block_h = min(triton.next_power_of_2(H), 64)
    block_t = max(TILE_ELEMS // block_h, 16)
    if os.environ.get("TRITON_INTERPRET") == "1":
        block_t = 16  # the interpreter is slow on big tiles; small ones also exercise the carry
        chunk = 32
    else:
        rows = triton.cdiv(T * B * triton.cdiv(H, block_h), TARGET_PROGRAMS)
        chunk = max(block_t, triton.next_power_of_2(rows))
    return block_t, block_h, chunk, triton.cdiv(T, chunk)


def _chunk_carry(h, beta, du, eps, B, T, H, layout):
    """Pass 1 and the carry between chunks: (B, H, n_chunks) fp32 sums over the earlier chunks of a
    (forward, du None) or over the later chunks of du (backward); None for a single chunk."""
    block_t, block_h, chunk, n_chunks = layout
    if n_chunks == 1:
        return None
    tot = torch.empty(B, H, n_chunks, device=h.device, dtype=torch.float32)  # chunks last: a fast cumsum
    grid = (n_chunks, B, triton.cdiv(H, block_h))
    x = h if du is None else du
    _chunk_totals[grid](h, beta, x, tot, T, H, eps, h.stride(0), h.stride(1), beta.stride(0), beta.stride(1),
                        x.stride(0), x.stride(1), tot.stride(0), tot.stride(2), tot.stride(1), CHUNK=chunk,
                        BLOCK_T=block_t,
                        BLOCK_H=block_h, FORWARD=du is None)
    inclusive = tot.cumsum(2)
    return inclusive - tot if du is None else inclusive[:, :, -1:] - inclusive


def gate_scan_fwd(h: torch.Tensor, beta: torch.Tensor, eps: float) -> torch.Tensor:
    """u (B, T, H) fp32 from h, beta (B, T, H); see the module docstring."""
    B, T, H = h.shape
    layout = block_t, block_h, chunk, n_chunks = _layout(T, B, H)
    u = torch.empty(B, T, H, device=h.device, dtype=torch.float32)
    carry = _chunk_carry(h, beta, None, eps, B, T, H, layout)
    c = u if carry is None else carry
    _scan_fwd[(n_chunks, B, triton.cdiv(H, block_h))](
        h, beta, u, c, T, H, eps, h.stride(0), h.stride(1), beta.stride(0), beta.stride(1), u.stride(0), u.stride(1),
        c.stride(0), c.stride(2), c.stride(1), CHUNK=chunk, BLOCK_T=block_t, BLOCK_H=block_h,
        HAS_CARRY=carry is not None)
    return u


def gate_scan_bwd(h: torch.Tensor, beta: torch.Tensor, du: torch.Tensor, eps: float):
    """(dh, dbeta), each (B, T, H) in the dtype of h, from the gradient du (B, T, H) of u."""
    B, T, H = h.shape
    layout = block_t, block_h, chunk, n_chunks = _layout(T, B, H)
    dh = torch.empty(B, T, H, device=h.device, dtype=h.dtype)
    dbeta = torch.empty_like(dh)
    carry = _chunk_carry(h, beta, du, eps, B, T, H, layout)
    c = du if carry is None else carry
    _scan_bwd[(n_chunks, B, triton.cdiv(H, block_h))](
        h, beta, du, dh, dbeta, c, T, H, eps, h.stride(0), h.stride(1), beta.stride(0), beta.stride(1), du.stride(0),
        du.stride(1), dh.stride(0), dh.stride(1), c.stride(0), c.stride(2), c.stride(1), CHUNK=chunk, BLOCK_T=block_t,
        BLOCK_H=block_h, HAS_CARRY=carry is not None)
    return dh, dbeta


class GateCumsum(torch.autograd.Function):
    """Autograd wrapper of the Triton scan; gradients flow to h and beta."""

    @staticmethod
    def forward(ctx, h, beta, eps):
        h, beta = last_dim_contiguous(h), last_dim_contiguous(beta)
        ctx.save_for_backward(h, beta)
        ctx.eps = eps
        return gate_scan_fwd(h, beta, eps)

    @staticmethod
    def backward(ctx, du):
        h, beta = ctx.saved_tensors
        dh, dbeta = gate_scan_bwd(h, beta, last_dim_contiguous(du.float()), ctx.eps)
        return dh, dbeta.to(beta.dtype), None


# Opaque to torch.compile: Inductor failed on the GatedFWA model (H100, torch 2.11, Triton 3.6: InductorError
# in its compile subprocess), and it has nothing to fuse into a hand-written kernel.
@not_compiled
def gate_cumsum_triton(h: torch.Tensor, beta: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Triton version of :func:`zoo.kernels.gatedfwa.naive.gate_cumsum_ref`; u is (B, T, H) fp32."""
    return GateCumsum.apply(h, beta, eps)
