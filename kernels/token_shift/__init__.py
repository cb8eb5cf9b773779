"""RWKV's token shift: G mixes of each token with the one before it, out_g = x + (x_prev - x) * mixes[g].

x_prev[:, t] = x[:, t - 1], zeros at t = 0. RWKV-4's ``lerp(x_prev, x, mu)`` is this with mixes = 1 - mu. (RWKV-7's
six mixes are folded into its projections instead, ``zoo.kernels.shifted_linear``, whose reference makes them with
``naive.py``.) Done in PyTorch, every training step pads (a copy of x),
runs one elementwise kernel per mix (or a broadcast one whose outputs are then views of a [G, B, T, D] stack), and
in the backward one more per mix for x's gradient, the token shift of those gradients, G reductions over (B, T) for
the mixes' gradients, and casts between float32 and bf16 around each. Profiling RWKV-4's CUDA-graph training step on
an H100 (B=256, T=256, D=128, bf16 autocast) put 1.16 s of its 1.82 s of GPU time per epoch in PyTorch's
elementwise kernels and reductions, these above all (with the float32 copies around the WKV kernel, now gone too).
``fused.py`` is one Triton kernel forward and one backward (plus one small sum of per-tile partials), float32 math,
deterministic, capturable in a CUDA graph. With it and the WKV kernel reading bf16 k and v (69587b2, H100, that
cell), RWKV-4's CUDA-graph step went from 4.77 to 2.45 ms, and the epoch's elementwise kernels and reductions from
1.16 to 0.24 s. Its tiles (64 x 64, 8 warps) are a first choice, not tuned.

``token_shift_mix(x, mixes, out_dtype=None, backend="auto")``: ``"triton"`` (``fused.py``, up to
``fused.MAX_MIXES`` mixes), ``"naive"`` (``naive.py``: ``F.pad`` and ``torch.addcmul``) or ``"auto"`` (Triton for
CUDA tensors). ``out_dtype`` (x's dtype by default) lets a layer whose mixes feed matmuls under autocast get them in
autocast's dtype (``zoo.kernels.autocast.matmul_dtype``), so the cast the matmul would make happens in the same pass.
``zoo.kernels.backend.last_backend("token_shift_mix")`` says which ran.
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import NAIVE, check_backend, recorded_path
from zoo.kernels.token_shift.naive import token_shift_mix_naive

BACKENDS = ("auto", "triton", NAIVE)


def token_shift_mix(x: torch.Tensor, mixes: torch.Tensor, out_dtype: torch.dtype | None = None,
                    backend: str = "auto") -> tuple[torch.Tensor, ...]:
    """x [B, T, D]; mixes [G, D] -> G tensors [B, T, D], ``x + (x_prev - x) * mixes[g]``, in ``out_dtype`` (None:
    x's dtype). x's gradient comes in its dtype, the mixes' in theirs."""
    check_backend(backend, BACKENDS)
    if x.dim() != 3 or mixes.dim() != 2 or mixes.shape[1] != x.shape[2]:
        raise ValueError(f"token_shift_mix: x {tuple(x.shape)} and mixes {tuple(mixes.shape)} are not valid: "
                         "expected x [B, T, D] and mixes [G, D]")
    fast = recorded_path("token_shift_mix", backend, "triton", "zoo.kernels.token_shift.fused", x,
                         "token_shift_mix on GPU (falls back to F.pad and torch.addcmul)")
    run = token_shift_mix_naive if fast is None else fast.token_shift_mix
    return run(x, mixes, out_dtype)


__all__ = ["token_shift_mix", "BACKENDS"]
