"""The (gated) delta rule by chunks in batched PyTorch matmuls: the GPU path of ``zoo.kernels.delta_rule``'s
gated op where fla's chunk kernels cannot run (Hopper GPUs with Triton < 3.7.1, see ``zoo.kernels.backend``).

Same recurrence as ``naive.py``. Inside a chunk of C steps starting from state S_0, with gamma_i the
cumulative log gate from the chunk's start through step i, unrolling gives

    S_i = e^{gamma_i} S_0 + sum_{j <= i} e^{gamma_i - gamma_j} k_j u_j^T

where u_i (row i of U, [C, V]) is step i's correction. Its definition u_i = beta_i (v_i - S'_i^T k_i), with
S'_i the gated state before step i's write, is the unit lower triangular system

    (I + A) U = diag(beta) V - diag(beta e^gamma) K S_0,    A_ij = beta_i e^{gamma_i - gamma_j} k_i . k_j (j < i)

so U = W1 - W2 S_0 with W1, W2 solved for every chunk at once, before S_0 is known. Then, with the decayed
scores P_ij = e^{gamma_i - gamma_j} q_i . k_j (j <= i, q scaled) and Kd = diag(e^{gamma_C - gamma}) K,

    O = P W1 + (diag(e^gamma) Q - P W2) S_0,    S_next = (e^{gamma_C} I - Kd^T W2) S_0 + Kd^T W1

are linear in S_0 with coefficients known for every chunk at once: only S_next = M S_0 + D loops, once per
chunk. Every exponent is gamma_i - gamma_j with j <= i (a sum of log gates, <= 0), never -gamma alone.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.backend import not_compiled, without_autocast
from zoo.kernels.delta_rule.naive import l2norm


@not_compiled  # a loop over chunks: torch.compile would unroll it, once per length
@without_autocast  # float32 inside, as the docstring says, also under bf16 autocast
def delta_rule_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                       g: torch.Tensor | None = None, scale: float | None = None, l2norm_qk: bool = False,
                       chunk: int = 64) -> torch.Tensor:
    """``naive.delta_rule_recurrent``'s result (same arguments, float32 or float64 inside) by chunks of
    ``chunk`` steps (fewer when T is shorter).

    q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H]; g: [B, T, H] log forget gates, or None;
    scale: K ** -0.5 when None; l2norm_qk: unit-length q and k first -> o: [B, T, H, V] in v's dtype.
    """
    out_dtype, dtype = v.dtype, torch.promote_types(v.dtype, torch.float32)
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    q, k, v, beta = (t.to(dtype) for t in (q, k, v, beta))
    if l2norm_qk:
        q, k = l2norm(q), l2norm(k)
    g = torch.zeros_like(beta) if g is None else g.to(dtype)
    C = min(chunk, T)
    N = -(-T // C)

    def chunks(t):  # [B, T, H, ...] -> [B, H, N, C, ...]; the padded steps (k = 0, beta = 0, g = 0) change nothing
        t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, N * C - T))
        return t.reshape(B, N, C, H, *t.shape[3:]).movedim(3, 1)

    q, k, v, beta, g = map(chunks, (q * scale, k, v, beta, g))
    gamma = g.cumsum(-1)  # [B, H, N, C]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    # e^{gamma_i - gamma_j} for j <= i, 0 above the diagonal (masked before exp: those exponents may overflow)
    decay = torch.exp((gamma[..., :, None] - gamma[..., None, :]).masked_fill(~causal, -torch.inf))
    kt = k.transpose(-1, -2)
    # A's diagonal (beta_i |k_i|^2) and zeros above are ignored: unitriangular solves with I + strict lower part.
    # Forward substitution, not a series in powers of A: with beta near 2 those powers grow while the inverse
    # stays bounded.
    A = beta[..., None] * (k @ kt) * decay
    rhs = beta[..., None] * torch.cat([v, gamma.exp()[..., None] * k], dim=-1)
    W1, W2 = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True).split([V, K], dim=-1)
    P = (q @ kt) * decay
    Kdt = (torch.exp(gamma[..., -1:] - gamma)[..., None] * k).transpose(-1, -2)  # [B, H, N, K, C]
    M = gamma[..., -1, None, None].exp() * torch.eye(K, dtype=dtype, device=q.device) - Kdt @ W2
    D = Kdt @ W1  # [B, H, N, K, V]
    states = [q.new_zeros(B, H, K, V)]
    for c in range(N - 1):
        states.append(M[:, :, c] @ states[-1] + D[:, :, c])
    S = torch.stack(states, dim=2)  # [B, H, N, K, V]: the state entering each chunk
    o = P @ W1 + (gamma.exp()[..., None] * q - P @ W2) @ S
    return o.movedim(1, 3).reshape(B, N * C, H, V)[:, :T].to(out_dtype)
