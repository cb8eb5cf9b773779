"""Plain PyTorch (gated) delta rule, one time step at a time.

Per head, with state S: (K, V), writing strength beta_t, optional log forget gate g_t <= 0 (a scalar
per head) and scale s::

    S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T,    o_t = s * S_t^T q_t

i.e. the value stored under k_t moves a fraction beta_t of the way to v_t (DeltaNet, Schlag et al. 2021,
Yang et al. 2024; the gate is Gated DeltaNet's, Yang et al. 2025). With unit-norm keys the transition
I - beta k k^T has eigenvalues 1 (orthogonal to k) and 1 - beta (along k): beta in (0, 1) keeps them in
[0, 1], beta in (0, 2) lets them reach into (-1, 0), which is what state tracking needs (Grazzi et al.
2024, "Unlocking State-Tracking in Linear RNNs Through Negative Eigenvalues").
"""
from __future__ import annotations

import torch

from zoo.kernels.backend import not_compiled


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim: fla's ``use_qk_l2norm_in_kernel`` form, so the CPU paths and
    fla's kernels agree also where |x| is small (``F.normalize``'s x / max(|x|, eps) differs there)."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


@not_compiled  # a loop over time: torch.compile would unroll it, once per length
def delta_rule_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                         g: torch.Tensor | None = None, scale: float | None = None,
                         l2norm_qk: bool = False) -> torch.Tensor:
    """The recurrence above in float32 (float64 stays float64).

    q, k: [B, T, H, K]; v: [B, T, H, V]; beta: [B, T, H]; g: [B, T, H] log forget gates, or None for
    the ungated rule; scale: s, K ** -0.5 when None (fla's default); l2norm_qk: first normalize q and k
    to unit length over K (fla's ``use_qk_l2norm_in_kernel``) -> o: [B, T, H, V] in v's dtype.
    """
    dtype = torch.promote_types(v.dtype, torch.float32)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k, v, beta = (t.to(dtype) for t in (q, k, v, beta))
    if l2norm_qk:
        q, k = l2norm(q), l2norm(k)
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        if g is not None:
            S = torch.exp(g[:, t].to(dtype))[..., None, None] * S
        kt = k[:, t]
        # v_t's correction: the new value minus what S already returns for k_t, scaled by beta_t
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhk,bhkv->bhv", kt, S))
        S = S + kt[..., None] * u[:, :, None]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S))
    return torch.stack(out, dim=1).to(v.dtype)
