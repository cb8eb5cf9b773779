"""Hyena's implicit filter in one autograd Function: the matmuls through cuBLAS, everything between them in one
Triton kernel per layer each way, float32 throughout (the entry casts the inputs; autocast is off inside, on any
device).

Why: the filter is an MLP over L positions, [L, 3] -> [L, 64] three times -> [L, D], tiny next to the batch's work,
but as PyTorch composes it under bf16 autocast each of its ops is a kernel of its own: casts of every weight and
activation, ``freq *``, ``sin``, the decay's ``exp``, and in the backward the cosines, products, the bias and
frequency sums and casts back, about 70 kernels per layer and training step. In Hyena's CUDA-graph step on an H100
(MQAR N=256, d_model 128, B=256) that was 140 of the step's 319 kernels, each a few microseconds of mostly idle GPU.
Here a layer is 8 kernels forward and 12 backward.

Forward, x_0 = z: for each hidden layer k, p_k = x_k @ W_k^T (cuBLAS) and x_{k+1} = sin(freq * (p_k + b_k))
(``_implicit_filter_sin_kernel``); then h = x_K @ W_out^T and out = h * exp(-t * deltas)
(``_implicit_filter_decay_kernel``). Saved: the x_k and p_k, [L, F] float32 each.

Backward, from dout: g = dout * exp(-t * deltas) (``_implicit_filter_decay_kernel`` again); dW_out = g^T x_K, dx_K = g
W_out; for each layer from the last, with q = freq * (p_k + b_k) and dq = dx_{k+1} * cos(q): dp = dq * freq, db_k = sum
over L of dp, dfreq += sum over L of dq * (p_k + b_k) (``_implicit_filter_sin_grad_kernel``: a program owns a block of
columns and walks every row, so the sums need no atomics and no second pass); dW_k = dp^T x_k, dx_k = dp W_k. The
frequencies are shared by every layer (one ``Sin`` module, as in Zoology), so their gradient is the sum over layers.

Math in float32, against the reference's bf16 matmuls under autocast: Zoology trains in float32, so this is nearer to
it, not further.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zoo.kernels.layout import last_dim_contiguous

BLOCK_ROWS = 32  # rows per program (forward kernels) or per step of a program's walk (the gradient kernel)
BLOCK_COLS = 16  # columns per program of the gradient kernel: F = 64 gives 4 programs, each walking all L rows


@triton.jit
def _implicit_filter_sin_kernel(P, BIAS, FREQ, X, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """X = sin(freq * (P + bias)) for contiguous [M, N] P and X."""
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.arange(0, BLOCK_N)
    ok = (m < M)[:, None] & (n < N)[None, :]
    offs = m[:, None] * N + n[None, :]
    p = tl.load(P + offs, mask=ok, other=0.0) + tl.load(BIAS + n, mask=n < N, other=0.0)[None, :]
    tl.store(X + offs, tl.sin(tl.load(FREQ + n, mask=n < N, other=0.0)[None, :] * p), mask=ok)


@triton.jit
def _implicit_filter_decay_kernel(H, T, DELTAS, OUT, M, N, s_m, s_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """OUT = H * exp(-t * deltas), H [M, N] with strides (s_m, s_n), t [M], deltas [N], OUT contiguous."""
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = (m < M)[:, None] & (n < N)[None, :]
    t = tl.load(T + m, mask=m < M, other=0.0)
    deltas = tl.load(DELTAS + n, mask=n < N, other=0.0)
    h = tl.load(H + m[:, None] * s_m + n[None, :] * s_n, mask=ok, other=0.0).to(tl.float32)
    tl.store(OUT + m[:, None] * N + n[None, :], h * tl.exp(-t[:, None] * deltas[None, :]), mask=ok)


@triton.jit
def _implicit_filter_sin_grad_kernel(DX, P, BIAS, FREQ, DP, DBIAS, DFREQ, M, N, ACCUMULATE: tl.constexpr,
                                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """For x = sin(freq * (p + bias)), [M, N] contiguous: DP = dx * cos(q) * freq with q = freq * (p + bias);
    DBIAS = the column sums of DP; DFREQ (+)= the column sums of dx * cos(q) * (p + bias)."""
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    bias = tl.load(BIAS + n, mask=n_ok, other=0.0)[None, :]
    freq = tl.load(FREQ + n, mask=n_ok, other=0.0)[None, :]
    dbias = tl.zeros([BLOCK_N], dtype=tl.float32)
    dfreq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        m = start + tl.arange(0, BLOCK_M)
        ok = (m < M)[:, None] & n_ok[None, :]
        offs = m[:, None] * N + n[None, :]
        p = tl.load(P + offs, mask=ok, other=0.0) + bias
        dq = tl.load(DX + offs, mask=ok, other=0.0) * tl.cos(freq * p)
        dp = dq * freq
        tl.store(DP + offs, dp, mask=ok)
        dbias += tl.sum(dp, axis=0)  # masked rows hold dx = 0, so they add nothing
        dfreq += tl.sum(dq * p, axis=0)
    tl.store(DBIAS + n, dbias, mask=n_ok)
    if ACCUMULATE:
        dfreq += tl.load(DFREQ + n, mask=n_ok, other=0.0)
    tl.store(DFREQ + n, dfreq, mask=n_ok)


def _sin(p: torch.Tensor, bias: torch.Tensor, freq: torch.Tensor) -> torch.Tensor:
    M, N = p.shape
    x = torch.empty_like(p)
    _implicit_filter_sin_kernel[(triton.cdiv(M, BLOCK_ROWS),)](p, bias, freq, x, M, N, BLOCK_M=BLOCK_ROWS,
                                                               BLOCK_N=triton.next_power_of_2(N))
    return x


def _decay(h: torch.Tensor, t: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
    M, N = h.shape
    out = torch.empty(M, N, device=h.device, dtype=torch.float32)
    block_n = min(triton.next_power_of_2(N), 128)
    _implicit_filter_decay_kernel[(triton.cdiv(M, BLOCK_ROWS), triton.cdiv(N, block_n))](
        h, t, deltas, out, M, N, *h.stride(), BLOCK_M=BLOCK_ROWS, BLOCK_N=block_n)
    return out


def _sin_grad(dx: torch.Tensor, p: torch.Tensor, bias: torch.Tensor, freq: torch.Tensor, dfreq: torch.Tensor,
              accumulate: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(dp, dbias); dfreq [N] gets (or, with ``accumulate``, adds) this layer's part."""
    M, N = p.shape
    dp, dbias = torch.empty_like(p), torch.empty_like(bias)
    _implicit_filter_sin_grad_kernel[(triton.cdiv(N, BLOCK_COLS),)](dx, p, bias, freq, dp, dbias, dfreq, M, N,
                                                                    ACCUMULATE=accumulate, BLOCK_M=BLOCK_ROWS,
                                                                    BLOCK_N=BLOCK_COLS)
    return dp, dbias


class ImplicitFilterFunction(torch.autograd.Function):
    """apply(z, freq, w_out, t, deltas, W_0, b_0, W_1, b_1, ...): the layers' parameters interleaved at the end."""

    @staticmethod
    def forward(ctx, z, freq, w_out, t, deltas, *layers):
        weights, biases = layers[0::2], layers[1::2]
        xs, ps = [z.contiguous()], []
        with torch.autocast(z.device.type, enabled=False):  # float32 matmuls under any device's autocast
            for w, b in zip(weights, biases):
                ps.append(xs[-1] @ w.t())
                xs.append(_sin(ps[-1], b, freq))
            out = _decay(xs[-1] @ w_out.t(), t, deltas)
        ctx.n_layers = len(weights)
        ctx.save_for_backward(freq, w_out, t, deltas, *layers, *xs, *ps)
        return out

    @staticmethod
    def backward(ctx, dout):
        K = ctx.n_layers
        freq, w_out, t, deltas, *rest = ctx.saved_tensors
        layers, xs, ps = rest[:2 * K], rest[2 * K:3 * K + 1], rest[3 * K + 1:]
        dlayers = [None] * (2 * K)
        with torch.autocast(dout.device.type, enabled=False):
            g = _decay(dout, t, deltas)
            dw_out = g.t() @ xs[K]
            dx = g @ w_out
            dfreq = torch.empty_like(freq)
            for k in reversed(range(K)):
                w, b = layers[2 * k], layers[2 * k + 1]
                dp, dlayers[2 * k + 1] = _sin_grad(dx, ps[k], b, freq, dfreq, accumulate=k < K - 1)
                dlayers[2 * k] = dp.t() @ xs[k]
                dx = dp @ w if k > 0 or ctx.needs_input_grad[0] else None
        return dx, dfreq, dw_out, None, None, *dlayers


def implicit_filter(z: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor], freq: torch.Tensor,
                    w_out: torch.Tensor, t: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
    """The entry's signature (``implicit_filter_naive``'s); h [L, D] float32, gradients in the inputs' dtypes (the
    kernels' math is float32 whatever the parameters' dtype: ``.float()`` is no copy for float32 ones)."""
    layers = [p.float() for pair in zip(weights, biases) for p in pair]
    return ImplicitFilterFunction.apply(z.float(), freq.float(), w_out.float(),
                                        last_dim_contiguous(t.reshape(-1).float()), deltas.float(), *layers)
