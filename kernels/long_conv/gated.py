"""Hyena's gates fused around the FFT long convolution: ``out = x2 * long_conv(x1 * v, h, bias)`` with
``x1, x2, v = xbc.chunk(3, -1)``, forward and backward in one ``torch.autograd.Function``, float32 inside.

Layout. The FFT buffers are [B, D, 2L], time last and contiguous, so cuFFT transforms B * D contiguous rows with
one batched plan (``torch.fft`` along dim 1 of a [B, L, D] tensor first copies it to that layout internally).
Four Triton kernels move between the [B, L, *] layout of xbc and the gradients and this one, reading xbc and the
output gradient where they lie (any strides), and writing the zero padding of the second half themselves
(``rfft(n=2L)`` of a length-L input would allocate a padded copy).

Spectrum. The skip ``bias * u[t]`` is one more term at lag 0: with h_eff = h plus ``bias`` on tap 0, y is the causal
convolution of u with h_eff alone, and since the DFT of a tap at 0 is flat, one product with
``hf = (rfft(h, 2L) + bias) / 2L``, [D, L + 1], does it. The ``1 / 2L`` is the inverse transform's normalization:
the inverse FFTs run with ``norm="forward"``, which skips their scaling pass over [B, D, 2L].

Inverse transforms. irfft (complex to real) would copy its whole input first: cuFFT overwrites a complex-to-real
transform's input, so PyTorch clones it on every call (16 device-to-device copies a step in Hyena's profile, 0.076 s
of an epoch of 1.27 s at B=256, L=256, D=128 on an H100). The spectral kernels instead write the spectrum packed
into L bins (``_packed``), whose complex inverse FFT of length L is the real 2L-point signal read as (real,
imaginary) pairs (``_unpacked``): the same transform size, no copy.

Forward: u = x1 * v (padded, ``_long_conv_gate_in_kernel``); yc = irfft(rfft(u) * hf) (``_long_conv_filter_kernel``,
packed, and ``_unpacked``); out = x2 * y with y = yc[:L] (``_long_conv_gate_out_kernel``). Saved: xbc, hf, uf = rfft(u)
[B, D, L + 1] complex64 and yc [B, D, 2L] float32 (about B * D * 2L * 4 bytes each: 67 MB at B=256, L=256, D=128).

Backward, with g = dout * x2 (``_long_conv_gate_grad_in_kernel``, which also writes dx2 = dout * y):
  du[s] = sum_{t>=s} h_eff[t - s] g[t] = irfft(rfft(g) * conj(hf))[s] for s < L (the correlation with the filter;
    t < s would reach lag t - s + 2L >= L, where the padded filter is zero);
  dx1 = du * v, dv = du * x1 (``_long_conv_gate_grad_out_kernel``, into the same contiguous [B, L, 3D] as dx2);
  dh_eff[k] = sum_{b, t} g[t] u[t - k] = irfft(sum_b conj(uf) * rfft(g))[k] for k < L (t < k reads u's zero half,
    so nothing wraps around); dh = dh_eff, and dbias = dh_eff[:, 0], the skip being tap 0.
``_long_conv_filter_grad_kernel`` forms rfft(g) * conj(hf), packed, and, for each chunk of ``Tiles.b`` sequences, the
sum over the chunk of conj(uf) * rfft(g) into its own row; one ``torch.sum`` over the rows finishes the batch sum. No
atomics (the filter gradient is the same bits on every run); every shape follows from the inputs' (no host sync), so a
CUDA graph captures both passes.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from zoo.kernels.layout import time_tile

NUM_WARPS = 4


class Tiles(NamedTuple):
    """Tile sizes, powers of two: times x channels of the four gate kernels; sequences walked per program x (channel,
    frequency) pairs per program of the two spectral ones. Tests make them small so that partial tiles fall inside
    tiny inputs.

    The gate kernels read one layout and write the other, so both sides of a tile should be whole 128-byte rows:
    32 float32 times of a buffer, 64 bf16 channels of xbc. Compiled for sm_90 with 4 warps and no specialization,
    64 x 64 tiles took up to 226 registers a thread (the backward's first kernel holds five tiles), 32 x 64 at most
    114; as the JIT specializes a launch at B=256, L=256, D=128 (contiguous channels), at most 48 with bf16 inputs,
    every global access 16 bytes wide. The spectral kernels' 256 pairs are two complex64 pairs, one 16-byte access,
    per thread and array; 16 sequences per program give B / 16 rows of partial sums and, at B=256, L=256, D=128,
    2048 programs (D L pairs, packed). Chosen from the compiled code, not timed on a GPU."""
    t: int = 32
    d: int = 64
    b: int = 16  # sequences per program of the spectral kernels: B / 16 rows of the filter gradient's partial sums
    n: int = 256


@triton.jit
def _gate_tile(L, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """(times t [BLOCK_T], channels d [BLOCK_D], sequence b, d < D, mask of the tile inside [L, D]) of this program."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = d < D
    return t, d, tl.program_id(2).to(tl.int64), d_ok, (t < L)[:, None] & d_ok[None, :]


@triton.jit
def _padded(P, b, t, d, L, D):
    """Pointers to P[b, d, t] of a contiguous [B, D, 2L] buffer, [BLOCK_T, BLOCK_D]."""
    # the sequence's offset in int64 on the scalar pointer, the tile's in int32: half the registers of int64 tiles
    return P + b * D * (2 * L) + (d[None, :] * (2 * L) + t[:, None])


@triton.jit
def _store_padded(P, b, t, d, L, D, x, ok):
    """P[b, d, t] <- x and P[b, d, t + L] <- 0 (the zero half the FFT's 2L padding needs) for a [B, D, 2L] buffer."""
    dst = _padded(P, b, t, d, L, D)
    tl.store(dst, x, mask=ok)
    tl.store(dst + L, tl.zeros_like(x), mask=ok)


@triton.jit
def _sequence(P, b, t, d, L, C):
    """Pointers to P[b, t, d] of a contiguous [B, L, C] tensor, [BLOCK_T, BLOCK_D]."""
    return P + b * L * C + (t[:, None] * C + d[None, :])


@triton.jit
def _long_conv_gate_in_kernel(XBC, U, L, D, sx_b, sx_t, sx_c, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """U [B, D, 2L] <- x1 * v at times < L, zero after; x1, v read from XBC [B, L, 3D]."""
    t, d, b, d_ok, ok = _gate_tile(L, D, BLOCK_T, BLOCK_D)
    X = XBC + b * sx_b
    u = time_tile(X, t, d, d_ok, L, sx_t, sx_c) * time_tile(X + 2 * D * sx_c, t, d, d_ok, L, sx_t, sx_c)
    _store_padded(U, b, t, d, L, D, u, ok)


@triton.jit
def _long_conv_gate_out_kernel(YC, XBC, OUT, L, D, sx_b, sx_t, sx_c, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """OUT [B, L, D] <- x2 * y, y the first L times of YC [B, D, 2L]."""
    t, d, b, d_ok, ok = _gate_tile(L, D, BLOCK_T, BLOCK_D)
    y = tl.load(_padded(YC, b, t, d, L, D), mask=ok)
    x2 = time_tile(XBC + b * sx_b + D * sx_c, t, d, d_ok, L, sx_t, sx_c)
    tl.store(_sequence(OUT, b, t, d, L, D), (x2 * y).to(OUT.dtype.element_ty), mask=ok)


@triton.jit
def _long_conv_gate_grad_in_kernel(DOUT, XBC, YC, G, DXBC, L, D, sx_b, sx_t, sx_c, sd_b, sd_t, sd_c,
                                   BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """G [B, D, 2L] <- g = dout * x2 at times < L, zero after; the x2 third of DXBC [B, L, 3D] <- dout * y."""
    t, d, b, d_ok, ok = _gate_tile(L, D, BLOCK_T, BLOCK_D)
    dout = time_tile(DOUT + b * sd_b, t, d, d_ok, L, sd_t, sd_c)
    g = dout * time_tile(XBC + b * sx_b + D * sx_c, t, d, d_ok, L, sx_t, sx_c)
    _store_padded(G, b, t, d, L, D, g, ok)
    y = tl.load(_padded(YC, b, t, d, L, D), mask=ok)
    tl.store(_sequence(DXBC, b, t, d, L, 3 * D) + D, (dout * y).to(DXBC.dtype.element_ty), mask=ok)


@triton.jit
def _long_conv_gate_grad_out_kernel(DU, XBC, DXBC, L, D, sx_b, sx_t, sx_c, BLOCK_T: tl.constexpr,
                                    BLOCK_D: tl.constexpr):
    """The x1 and v thirds of DXBC [B, L, 3D] <- du * v and du * x1, du the first L times of DU [B, D, 2L]."""
    t, d, b, d_ok, ok = _gate_tile(L, D, BLOCK_T, BLOCK_D)
    du = tl.load(_padded(DU, b, t, d, L, D), mask=ok)
    X = XBC + b * sx_b
    x1 = time_tile(X, t, d, d_ok, L, sx_t, sx_c)
    v = time_tile(X + 2 * D * sx_c, t, d, d_ok, L, sx_t, sx_c)
    dst = _sequence(DXBC, b, t, d, L, 3 * D)
    tl.store(dst, (du * v).to(DXBC.dtype.element_ty), mask=ok)
    tl.store(dst + 2 * D, (du * x1).to(DXBC.dtype.element_ty), mask=ok)


@triton.jit
def _complex_pointers(P, offs):
    """Pointers to the (real, imaginary) pairs of the complex elements ``offs`` [BLOCK_N] of a complex64 tensor
    viewed as float32: [BLOCK_N, 2], so that a pair is one 8-byte load."""
    return P + 2 * offs[:, None] + tl.arange(0, 2)[None, :]


@triton.jit
def _load_complex(P, offs, ok):
    """(real, imaginary), float32 [BLOCK_N] each, zero where ``ok`` is false."""
    return tl.split(tl.load(_complex_pointers(P, offs), mask=ok[:, None], other=0.0))


@triton.jit
def _store_complex(P, offs, ok, re, im):
    tl.store(_complex_pointers(P, offs), tl.join(re, im), mask=ok[:, None])


@triton.jit
def _times(ar, ai, br, bi):
    """a * b of complex numbers as (real, imaginary) pairs."""
    return ar * br - ai * bi, ar * bi + ai * br


@triton.jit
def _times_conj(ar, ai, br, bi):
    """a * conj(b) of complex numbers as (real, imaginary) pairs."""
    return ar * br + ai * bi, ai * br - ar * bi


@triton.jit
def _packed(yr, yi, mr, mi, k, L):
    """Z[k] of the half-length spectrum whose inverse FFT is a real 2L-point signal, packed: for Y the signal's
    one-sided spectrum [L + 1] (scaled as irfft with norm="forward" reads it), y[2m] + i y[2m + 1] = sum_k Z[k]
    exp(2 pi i m k / L) with Z[k] = (Y[k] + conj(Y[L - k])) + i (Y[k] - conj(Y[L - k])) exp(i pi k / L). (yr, yi):
    Y[k]; (mr, mi): Y[L - k]."""
    sr, si = yr + mr, yi - mi  # Y[k] + conj(Y[L - k])
    dr, di = yr - mr, yi + mi  # Y[k] - conj(Y[L - k])
    angle = k.to(tl.float32) * (3.141592653589793 / L)
    c, s = tl.cos(angle), tl.sin(angle)
    return sr - dr * s - di * c, si + dr * c - di * s


# The spectral kernels: a program owns a block of BLOCK_N (channel, frequency) pairs of the packed [D, L] spectrum
# and walks BLOCK_B sequences one after another, so every load is a run of BLOCK_N pairs (the mirrored bins L - k
# run backwards through the same channel's row, mostly cache hits), the filter's block is loaded once, and the batch
# sum of the filter gradient stays in each thread's registers. (A [BLOCK_B, BLOCK_N] tile per program, summed over
# its rows with tl.sum, took 0.38 ms per call of the backward's kernel at B=256, L=256, D=128 on an H100, about 5x
# its bytes; walking the sequences 0.074 ms, and the forward's 0.087 -> 0.047 ms: an epoch's profile of Hyena's step,
# 69587b2.) They write the packed spectrum, which ``torch.fft.ifft`` turns into the real 2L-point signal: irfft
# (complex to real) would first copy its whole input, as cuFFT overwrites it (PyTorch clones it every call).
@triton.jit
def _spectral_bins(D, L, BLOCK_N: tl.constexpr):
    """(flat packed index j [BLOCK_N], j < D L, offsets of bins k and L - k in a [D, L + 1] spectrum, k == 0: the
    lanes that also own the last bin, L) of this program's block: j = d L + k."""
    j = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    d, k = j // L, j % L
    row = d * (L + 1)
    return j, j < D * L, row + k, row + L - k, k


@triton.jit
def _long_conv_filter_kernel(UF, HF, ZF, B, D, L, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr):
    """ZF[b] [D, L] <- the packed spectrum of Y = UF[b] * HF ([D, L + 1] spectra, HF shared by the batch)."""
    j, ok_j, at_k, at_m, k = _spectral_bins(D, L, BLOCK_N)
    hr, hi = _load_complex(HF, at_k, ok_j)
    hmr, hmi = _load_complex(HF, at_m, ok_j)
    for i in tl.static_range(BLOCK_B):
        b = tl.program_id(1) * BLOCK_B + i
        ok = ok_j & (tl.full([BLOCK_N], b, tl.int32) < B)  # a [BLOCK_N] mask: the interpreter takes no scalar
        seq = b.to(tl.int64) * D * (L + 1)
        ur, ui = _load_complex(UF, seq + at_k, ok)
        umr, umi = _load_complex(UF, seq + at_m, ok)
        yr, yi = _times(ur, ui, hr, hi)
        mr, mi = _times(umr, umi, hmr, hmi)
        zr, zi = _packed(yr, yi, mr, mi, k, L)
        _store_complex(ZF, b.to(tl.int64) * D * L + j, ok, zr, zi)


@triton.jit
def _long_conv_filter_grad_kernel(GF, UF, HF, DZ, PARTIAL, B, D, L, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr):
    """DZ[b] [D, L] <- the packed spectrum of GF[b] * conj(HF) (du's); row ``program_id(1)`` of PARTIAL [B / BLOCK_B,
    D, L + 1] <- the sum of conj(UF[b]) * GF[b] over this program's sequences (the filter gradient's spectrum, in
    part), bin k by the lane of k and bin L also by the lane of k = 0."""
    j, ok_j, at_k, at_m, k = _spectral_bins(D, L, BLOCK_N)
    hr, hi = _load_complex(HF, at_k, ok_j)
    hmr, hmi = _load_complex(HF, at_m, ok_j)
    last = ok_j & (k == 0)  # lanes that own bin L too (at_m is then that bin)
    sr = tl.zeros([BLOCK_N], dtype=tl.float32)
    si = tl.zeros([BLOCK_N], dtype=tl.float32)
    lr = tl.zeros([BLOCK_N], dtype=tl.float32)
    li = tl.zeros([BLOCK_N], dtype=tl.float32)
    for i in tl.static_range(BLOCK_B):
        b = tl.program_id(1) * BLOCK_B + i
        ok = ok_j & (tl.full([BLOCK_N], b, tl.int32) < B)  # rows past the batch add nothing to the sums
        seq = b.to(tl.int64) * D * (L + 1)
        gr, gi = _load_complex(GF, seq + at_k, ok)
        gmr, gmi = _load_complex(GF, seq + at_m, ok)
        ur, ui = _load_complex(UF, seq + at_k, ok)
        umr, umi = _load_complex(UF, seq + at_m, ok & last)
        yr, yi = _times_conj(gr, gi, hr, hi)  # du's spectrum at k and at L - k
        mr, mi = _times_conj(gmr, gmi, hmr, hmi)
        zr, zi = _packed(yr, yi, mr, mi, k, L)
        _store_complex(DZ, b.to(tl.int64) * D * L + j, ok, zr, zi)
        pr, pi = _times_conj(gr, gi, ur, ui)  # conj(uf) * gf at k, and at L on the lanes of k = 0
        sr, si = sr + pr, si + pi
        pr, pi = _times_conj(gmr, gmi, umr, umi)
        lr, li = lr + pr, li + pi
    row = tl.program_id(1).to(tl.int64) * D * (L + 1)
    _store_complex(PARTIAL, row + at_k, ok_j, sr, si)
    _store_complex(PARTIAL, row + at_m, last, lr, li)


def _gate_grid(xbc: torch.Tensor, tiles: Tiles) -> tuple[int, int, int]:
    B, L, D3 = xbc.shape
    return triton.cdiv(L, tiles.t), triton.cdiv(D3 // 3, tiles.d), B


def _spectral_grid(B: int, N: int, tiles: Tiles) -> tuple[int, int]:
    return triton.cdiv(N, tiles.n), triton.cdiv(B, tiles.b)


def _unpacked(z: torch.Tensor) -> torch.Tensor:
    """The real [B, D, 2L] signal of a packed [B, D, L] spectrum (``_packed``): its inverse FFT, unscaled, read as
    (real, imaginary) pairs, which are the signal's (even, odd) times."""
    B, D, L = z.shape
    return torch.view_as_real(torch.fft.ifft(z, norm="forward")).view(B, D, 2 * L)


def gated_long_conv_forward(xbc, h, bias, tiles: Tiles):
    """xbc [B, L, 3D] (any strides); h [L, D]; bias [D] -> (out [B, L, D] in xbc's dtype, contiguous; and what the
    backward reads: hf [D, L + 1] the scaled filter spectrum, uf [B, D, L + 1] the input spectrum, yc [B, D, 2L]
    the convolution, y at times < L)."""
    B, L, D3 = xbc.shape
    D, n = D3 // 3, 2 * L
    hf = (torch.fft.rfft(h.float().t(), n=n) + bias.float()[:, None]) / n  # the skip and irfft's 1/n (docstring)
    grid = _gate_grid(xbc, tiles)
    u = torch.empty(B, D, n, dtype=torch.float32, device=xbc.device)
    _long_conv_gate_in_kernel[grid](xbc, u, L, D, *xbc.stride(), BLOCK_T=tiles.t, BLOCK_D=tiles.d, num_warps=NUM_WARPS)
    uf = torch.fft.rfft(u)
    zf = torch.empty(B, D, L, dtype=torch.complex64, device=xbc.device)
    _long_conv_filter_kernel[_spectral_grid(B, D * L, tiles)](
        torch.view_as_real(uf), torch.view_as_real(hf), torch.view_as_real(zf), B, D, L, BLOCK_B=tiles.b,
        BLOCK_N=tiles.n, num_warps=NUM_WARPS)
    yc = _unpacked(zf)
    out = torch.empty(B, L, D, dtype=xbc.dtype, device=xbc.device)
    _long_conv_gate_out_kernel[grid](yc, xbc, out, L, D, *xbc.stride(), BLOCK_T=tiles.t, BLOCK_D=tiles.d,
                                     num_warps=NUM_WARPS)
    return out, hf, uf, yc


def gated_long_conv_backward(dout, xbc, hf, uf, yc, tiles: Tiles):
    """dout [B, L, D] (any strides) and the forward's saved tensors -> (dxbc [B, L, 3D] in xbc's dtype, contiguous;
    dh_eff [D, L] float32, the gradient of the filter whose tap 0 holds the skip: dh = dh_eff.t(), dbias =
    dh_eff[:, 0])."""
    B, L, D3 = xbc.shape
    D, n = D3 // 3, 2 * L
    grid = _gate_grid(xbc, tiles)
    dxbc = torch.empty(B, L, D3, dtype=xbc.dtype, device=xbc.device)
    g = torch.empty(B, D, n, dtype=torch.float32, device=xbc.device)
    _long_conv_gate_grad_in_kernel[grid](dout, xbc, yc, g, dxbc, L, D, *xbc.stride(), *dout.stride(), BLOCK_T=tiles.t,
                                         BLOCK_D=tiles.d, num_warps=NUM_WARPS)
    gf = torch.fft.rfft(g)
    spectral = _spectral_grid(B, D * L, tiles)
    dz = torch.empty(B, D, L, dtype=torch.complex64, device=xbc.device)
    partial = torch.empty(spectral[1], D, L + 1, dtype=torch.complex64, device=xbc.device)
    _long_conv_filter_grad_kernel[spectral](
        torch.view_as_real(gf), torch.view_as_real(uf), torch.view_as_real(hf), torch.view_as_real(dz),
        torch.view_as_real(partial), B, D, L, BLOCK_B=tiles.b, BLOCK_N=tiles.n, num_warps=NUM_WARPS)
    du = _unpacked(dz)
    _long_conv_gate_grad_out_kernel[grid](du, xbc, dxbc, L, D, *xbc.stride(), BLOCK_T=tiles.t, BLOCK_D=tiles.d,
                                          num_warps=NUM_WARPS)
    return dxbc, torch.fft.irfft(partial.sum(0), n=n)[:, :L]


class GatedLongConvFunction(torch.autograd.Function):
    """:func:`gated_long_conv_forward`, saving xbc and its float32 intermediates; :func:`gated_long_conv_backward`."""

    @staticmethod
    def forward(ctx, xbc, h, bias, tiles):
        out, *saved = gated_long_conv_forward(xbc, h, bias, tiles)
        ctx.save_for_backward(xbc, *saved)
        ctx.dtypes, ctx.tiles = (h.dtype, bias.dtype), tiles
        return out

    @staticmethod
    def backward(ctx, dout):
        dxbc, dh_eff = gated_long_conv_backward(dout, *ctx.saved_tensors, ctx.tiles)
        h_dtype, bias_dtype = ctx.dtypes
        return dxbc, dh_eff.t().to(h_dtype), dh_eff[:, 0].to(bias_dtype), None


def gated_long_conv(xbc: torch.Tensor, h: torch.Tensor, bias: torch.Tensor, tiles: Tiles = Tiles()) -> torch.Tensor:
    """The entry's signature: xbc [B, L, 3D] (any strides); h [L, D]; bias [D] -> [B, L, D] in xbc's dtype;
    gradients in their inputs' dtypes."""
    B, L, D3 = xbc.shape
    D = D3 // 3
    if D3 % 3 or h.shape != (L, D) or bias.shape != (D,):
        raise ValueError(f"gated_long_conv: xbc {tuple(xbc.shape)}, h {tuple(h.shape)} and bias "
                         f"{tuple(bias.shape)} do not fit: expected [B, L, 3D], [L, D] and [D]")
    return GatedLongConvFunction.apply(xbc, h, bias, tiles)
