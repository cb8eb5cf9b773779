"""The long causal convolution as a batched matrix product with each channel's lower-triangular Toeplitz matrix.

Per channel d, ``y[:, :, d] = u[:, :, d] @ T_d^T`` with ``T_d[t, s] = h[t - s, d]`` for ``t >= s`` and 0 above
the diagonal: D products [B, L] x [L, L] in one ``torch.bmm``, on tensor cores for bf16/fp16 inputs. The skip
``bias * u`` rides on the main diagonal (``T_d[t, t] = h[0, d] + bias[d]``), so it costs no extra pass, ``du``
gets ``bias * dy`` from the same product and ``dbias`` is the main diagonal's gradient (``sum_{b,t} dy * u``).

Shapes: u (B, L, D), h (L, D), bias (D,) -> (B, L, D) in u's dtype, as the FFT path returns.

Work (the products are dense: the zeros above the diagonal are multiplied too)
  forward  one bmm, 2 * B * L * L * D FLOPs;
  backward two bmms, dU_d = dY_d @ T_d and dT_d = dY_d^T @ U_d, 4 * B * L * L * D FLOPs, and a sum over
           each diagonal of dT_d for dh (D * L * L additions).

Memory
  saved for backward: u, h and bias, the inputs themselves (T is rebuilt in the backward, not kept);
  transient, forward: T (D * L * L elements of the compute dtype), U and Y as (D, B, L) (B * L * D each);
  transient, backward: T, U, dY and dU as (D, B, L), and dT written into a zero-padded (D, 2L, L) buffer
  (2 * D * L * L elements). T alone is D * L * L elements: D=512, L=512 -> 134M (268 MB in bf16, 537 MB
  in fp32), i.e. L / B times the size of u. The FFT path's intermediates are instead complex [B, L + 1, D]
  (8 bytes a value) and it keeps some of them for its backward.

When the FFT path is preferable: the work here is O(B L^2 D) against the FFT's O(B L log L D), and T grows as
L^2; for long sequences (thousands of positions), or when L is much larger than B so that T dominates memory,
take ``fft``. This path wins for short L (hundreds) where the FFT's casts, strided transforms and complex
intermediates cost more than a small dense product on tensor cores.

Precision and autocast: the compute dtype is u's dtype when u is bf16 or fp16 (cuBLAS accumulates in float32
and rounds the product once to that dtype), float32 when u is float32, float64 for float64. h and bias are cast
to it whatever their dtype: under training's bf16 autocast Hyena hands in a bf16 u and a float32 h (the
filter MLP's bf16 output times a float32 decay), and the taps are rounded to bf16 here. The Function turns
autocast off and casts by itself, so an enclosing autocast changes nothing inside it: a float32 u under
autocast is still computed in float32 (on a GPU, in TF32 only if ``torch.backends.cuda.matmul`` allows it).
Gradients come back in each input's dtype; dh and dbias are summed in float32 (float64 for float64).

Determinism: T is built by a gather (no autograd through indexing, whose backward would be an index_put with
atomics); dh comes from a strided view of the padded dT summed along its last dimension; no atomics anywhere.
"""
from __future__ import annotations

import torch

HALF = (torch.bfloat16, torch.float16)


def compute_dtype(u: torch.Tensor) -> torch.dtype:
    """bf16/fp16 u -> its dtype (tensor cores); otherwise at least float32."""
    return u.dtype if u.dtype in HALF else torch.promote_types(u.dtype, torch.float32)


def toeplitz_index(L: int, device: torch.device) -> torch.Tensor:
    """(L, L) int64: ``t - s`` for ``t >= s``, else ``L`` (the zero slot of a zero-padded row of L + 1 taps)."""
    pos = torch.arange(L, device=device)
    lag = pos[:, None] - pos[None, :]
    return torch.where(lag >= 0, lag, L)


def toeplitz_matrices(taps: torch.Tensor) -> torch.Tensor:
    """taps (D, L) -> T (D, L, L) with ``T[d, t, s] = taps[d, t - s]`` for ``t >= s``, 0 above the diagonal.
    A gather (plain indexing) into the zero-padded taps, same dtype; called without autograd."""
    D, L = taps.shape
    padded = torch.cat([taps, taps.new_zeros(D, 1)], dim=1)  # (D, L + 1): column L is the zero slot
    return padded[:, toeplitz_index(L, taps.device)]


def diagonal_sums(dT_padded: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """dT_padded (D, 2L, L), rows L..2L-1 zero -> (D, L) in ``dtype``: ``[d, k] = sum_{t - s = k} dT[d, t, s]``.

    The strided view (D, L, L) with strides (2L*L, L, L+1) puts ``dT_padded[d, j + k, j]`` at ``[d, k, j]``:
    summing over j walks the k-th diagonal (t = j + k, s = j); where ``j + k >= L`` it reads the zero rows, so
    only the L - k entries of the diagonal count. Entries above the diagonal (s > t) are never read. The
    largest offset read in a channel is (L-1)*L + (L-1)*(L+1) = 2L^2 - L - 1, inside its 2L^2 block.
    """
    D, L2, L = dT_padded.shape
    assert L2 == 2 * L and dT_padded.is_contiguous()
    diagonals = dT_padded.as_strided((D, L, L), (2 * L * L, L, L + 1))
    return diagonals.sum(dim=-1, dtype=dtype)


def _dense(view: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous copy of ``view`` in ``dtype``: one pass, whether or not the dtype changes (``.to`` would keep
    a permuted layout, and ``.contiguous()`` after it would copy twice)."""
    return torch.empty(view.shape, dtype=dtype, device=view.device).copy_(view)


def _channel_major(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, L, D) -> (D, B, L) contiguous in ``dtype``."""
    return _dense(x.permute(2, 0, 1), dtype)


class _ToeplitzCausalConv(torch.autograd.Function):
    @staticmethod
    def _taps(h: torch.Tensor, bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(D, L) taps in ``dtype`` with the skip on lag 0: ``h[0] + bias`` added in (at least) float32."""
        acc = torch.promote_types(dtype, torch.float32)
        taps = h.to(acc).t().contiguous()
        taps[:, 0] += bias.to(acc)
        return taps.to(dtype)

    @staticmethod
    def forward(ctx, u: torch.Tensor, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        dtype = compute_dtype(u)
        with torch.autocast(device_type=u.device.type, enabled=False):
            T = toeplitz_matrices(_ToeplitzCausalConv._taps(h, bias, dtype))  # (D, L, L)
            y = torch.bmm(_channel_major(u, dtype), T.transpose(1, 2))  # (D, B, L)
            out = _dense(y.permute(1, 2, 0), u.dtype)
        ctx.save_for_backward(u, h, bias)
        return out

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        u, h, bias = ctx.saved_tensors
        need_u, need_h, need_bias = ctx.needs_input_grad
        du = dh = dbias = None
        dtype = compute_dtype(u)
        with torch.autocast(device_type=u.device.type, enabled=False):
            g = _channel_major(dy, dtype)  # (D, B, L)
            if need_u:
                T = toeplitz_matrices(_ToeplitzCausalConv._taps(h, bias, dtype))
                du = _dense(torch.bmm(g, T).permute(1, 2, 0), u.dtype)
                del T
            if need_h or need_bias:
                D, B, L = g.shape
                dT = g.new_empty(D, 2 * L, L)
                dT[:, L:].zero_()
                torch.bmm(g.transpose(1, 2), _channel_major(u, dtype), out=dT[:, :L])  # dY_d^T @ U_d
                dtaps = diagonal_sums(dT, torch.promote_types(dtype, torch.float32))  # (D, L)
                del dT
                if need_h:
                    dh = _dense(dtaps.t(), h.dtype)
                if need_bias:
                    dbias = _dense(dtaps[:, 0], bias.dtype)  # lag 0 = main diagonal: sum over b, t of dy * u
        return du, dh, dbias


def toeplitz_causal_conv(u: torch.Tensor, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``y[t] = sum_{s<=t} h[t-s] u[s] + bias * u[t]`` per channel, as D batched [B, L] x [L, L] products.

    u: (B, L, D); h: (L, D); bias: (D,) -> (B, L, D) in u's dtype. 2 * B * L^2 * D FLOPs forward, twice that
    backward; a transient (D, L, L) Toeplitz matrix (2 * D * L * L elements for dT in the backward). See the
    module docstring for the compute dtype under autocast and when the FFT path is the better choice.
    """
    if u.dim() != 3 or h.shape != (u.shape[1], u.shape[2]) or bias.shape != (u.shape[2],):
        raise ValueError(f"expected u (B, L, D), h (L, D), bias (D,): got {tuple(u.shape)}, {tuple(h.shape)}, "
                         f"{tuple(bias.shape)}")
    return _ToeplitzCausalConv.apply(u, h, bias)
