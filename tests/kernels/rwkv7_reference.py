"""RWKV-7's recurrence written with explicit transition matrices, the kernel tests' float64 reference."""
import torch


def transitions(r, w, k, v, a, b):
    """S_t = (diag(exp(w_t)) + b_t a_t^T) S_{t-1} + k_t v_t^T, o_t = S_t^T r_t, in the inputs' dtype.

    r, w, k, a, b: (B, L, H, K); v: (B, L, H, V) -> o: (B, L, H, V)."""
    B, L, H, K = r.shape
    S = r.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(L):
        G = torch.diag_embed(torch.exp(w[:, t])) + b[:, t, ..., :, None] * a[:, t, ..., None, :]  # (B, H, K, K)
        S = G @ S + k[:, t, ..., :, None] * v[:, t, ..., None, :]
        out.append((r[:, t, ..., None, :] @ S).squeeze(-2))
    return torch.stack(out, 1)
