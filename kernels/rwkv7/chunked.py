"""RWKV-7's state recurrence (``naive.py``) by chunks in batched PyTorch: the GPU path of ``zoo.kernels.rwkv7``
where fla's ``chunk_rwkv7`` cannot run (Hopper GPUs with Triton < 3.7.1, see ``zoo.kernels.backend``).

Per head, inside a chunk of C steps from state S_0, with cw_t = w_1 + ... + w_t the cumulative log decay
(cw_0 = 0) and Γ(t, j) = diag(exp(cw_t - cw_j)) the decay from step j to step t, let x_t = S_{t-1}^T a_t
(a V-vector). Unrolling S_{t-1} = Γ(t-1, 0) S_0 + sum_{j<t} Γ(t-1, j) (b_j x_j^T + k_j v_j^T) gives

    x_i = sum_{j<i} A_ij x_j + sum_{j<i} (a_i^T Γ(i-1, j) k_j) v_j + S_0^T (exp(cw_{i-1}) a_i),
    A_ij = a_i^T Γ(i-1, j) b_j   (strictly lower triangular)

so one unit-triangular solve per chunk gives x = W1 + W2 S_0 before S_0 is known. Then

    O = (Rb W1 + Rk V) + (Rd + Rb W2) S_0,   S_C = (diag(exp(cw_C)) + Bd^T W2) S_0 + Bd^T W1 + Kd^T V

with Rb_tj = r_t^T Γ(t, j) b_j and Rk_tj = r_t^T Γ(t, j) k_j (j <= t), and Rd, Bd, Kd the rows exp(cw_t) r_t,
exp(cw_C - cw_j) b_j and exp(cw_C - cw_j) k_j: every chunk's coefficients come from batched matmuls at once,
and only S_next = M S_0 + U loops, one (K, K) @ (K, V) product per chunk.

Overflow: each decay is exp(cw_i - cw_j) with j <= i, an exponent <= 0, so nothing overflows whatever w is
(w = -20 is tested); a decay that underflows is below what float32 can add to the terms beside it. Never
exp(cw_i) exp(-cw_j): that overflows once a chunk's decays sum past about -88 (16 steps of w = -6). The pairwise
decays are therefore kept explicitly, a (C, C, K) tensor per chunk, and contracted with a_i and r_i (then b_j,
k_j) elementwise and by a matmul. That costs memory: autograd keeps three times B H L C K floats (the decays,
and their products with a and with r), 1.1 GB each at B=256, L=512, H=2, K=64 and C=16, which is why
chunks are short. The per-chunk transitions and states add B H L (K + V) K / C floats.

Measured on an H100 (torch 2.11, float32, B=128, H=2, K=V=64, forward and backward): 6.6 ms at L=128 and
18.5 ms at L=512 (4.9 GiB peak), against 140 ms and 612 ms for the step-by-step recurrence; chunks of 8 took
7.7 and 19.0 ms (3.6 GiB peak at L=512). Forward and backward capture in a CUDA graph.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from zoo.kernels.backend import not_compiled, without_autocast


@not_compiled  # a loop over chunks: torch.compile would unroll it, once per length
@without_autocast  # float32 inside, as the docstring says, also under bf16 autocast
def rwkv7_chunked(r, w, k, v, a, b, chunk: int = 16) -> torch.Tensor:
    """``rwkv7_naive``'s result by chunks of ``chunk`` steps (fewer when L is shorter), in float32 (float64 if
    an input is: the tests' exact reference).

    r, w, k, a, b: (B, L, H, K), w the log decays (< 0); v: (B, L, H, V) -> o: (B, L, H, V).
    """
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in (r, w, k, v, a, b)), torch.float32)
    Bt, L, H, K = r.shape
    V = v.shape[-1]
    C = min(chunk, L)
    pad = -L % C
    nc = (L + pad) // C

    def chunks(t):  # (B, L, H, D) -> (nc, B H, C, D); padded steps (all zero: w = 0 is decay 1) are no-ops
        t = F.pad(t.to(dtype), (0, 0, 0, 0, 0, pad))
        return t.view(Bt, nc, C, H, -1).permute(1, 0, 3, 2, 4).reshape(nc, Bt * H, C, t.shape[-1])

    r, w, k, v, a, b = (chunks(t) for t in (r, w, k, v, a, b))
    cw = w.cumsum(-2)  # (.., C, K): cw_1 .. cw_C
    prev = F.pad(cw, (0, 0, 1, -1))  # cw_0 .. cw_{C-1}
    # decay[j, i] = exp(cw_{i-1} - cw_j), the decay Γ(i-1, j), for j < i, else 0: exponents <= 0, no overflow.
    # j-major, so that each j is one matrix for the matmul below.
    earlier = torch.ones(C, C, dtype=torch.bool, device=w.device).triu(1)
    decay = torch.exp((prev[..., None, :, :] - cw[..., :, None, :]).masked_fill(~earlier[..., None], -torch.inf))
    # r_t^T Γ(t, j) = (exp(w_t) r_t)^T Γ(t-1, j) for j < t: a and r share the decays, r's diagonal is added below
    left = torch.stack((a, torch.exp(w) * r), dim=-3)  # (.., 2, C, K)
    bk = torch.stack((b, k), dim=-1)  # (.., C, K, 2)
    scores = (decay[..., :, None, :, :] * left[..., None, :, :, :]).flatten(-3, -2) @ bk  # (.., C_j, 2 C_i, 2)
    scores = scores.unflatten(-2, (2, C)).permute(0, 1, 3, 5, 4, 2)  # (.., a or r, b or k, C_i, C_j)
    A, Ak = scores[:, :, 0, 0], scores[:, :, 0, 1]  # a_i^T Γ(i-1, j) (b_j, k_j)
    Rb = scores[:, :, 1, 0] + torch.diag_embed((r * b).sum(-1))  # r_t^T Γ(t, j) (b_j, k_j), j <= t
    Rk = scores[:, :, 1, 1] + torch.diag_embed((r * k).sum(-1))
    # x = W[..., :V] + W[..., V:] @ S_0, with exp(cw_{i-1}) a_i the rows of S_0's coefficient
    rhs = torch.cat((Ak @ v, torch.exp(prev) * a), dim=-1)
    W = torch.linalg.solve_triangular(-A, rhs, upper=False, unitriangular=True)  # (I - A)^-1; -A's diagonal unread
    RW = Rb @ W
    Q = torch.exp(cw) * r + RW[..., V:]  # o = intra + Q @ S_0
    intra = RW[..., :V] + Rk @ v
    end = torch.exp(cw[..., -1:, :] - cw)  # (.., C, K): exp(cw_C - cw_j)
    BW = (end * b).transpose(-1, -2) @ W
    M = torch.diag_embed(torch.exp(cw[..., -1, :])) + BW[..., V:]  # S_C = M @ S_0 + U
    U = BW[..., :V] + (end * k).transpose(-1, -2) @ v
    states = [v.new_zeros(Bt * H, K, V)]
    for M_c, U_c in zip(M.unbind(0)[:-1], U.unbind(0)[:-1]):  # unbind: one backward stack, not one per chunk
        states.append(torch.baddbmm(U_c, M_c, states[-1]))
    o = intra + Q @ torch.stack(states)  # (nc, B H, C, V)
    return o.view(nc, Bt, H, C, V).permute(1, 0, 3, 2, 4).reshape(Bt, nc * C, H, V)[:, :L]
