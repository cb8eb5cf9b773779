"""Random inputs of the (gated) delta rule for the kernel tests: unit-norm keys, writing strengths in
[0, beta_max), log forget gates logsigmoid(N(0, 1) + log_gate_shift) (weaker gates for a shift > 0)."""
import torch
import torch.nn.functional as F


def inputs(B, T, H, K, V, beta_max=1.0, log_gate_shift=0.0, dtype=torch.float64, device="cpu"):
    """q, k: [B, T, H, K]; v: [B, T, H, V]; beta, g: [B, T, H]."""
    q = torch.randn(B, T, H, K, dtype=dtype, device=device)
    k = F.normalize(torch.randn(B, T, H, K, dtype=dtype, device=device), dim=-1)
    v = torch.randn(B, T, H, V, dtype=dtype, device=device)
    beta = beta_max * torch.rand(B, T, H, dtype=dtype, device=device)
    g = F.logsigmoid(torch.randn(B, T, H, dtype=dtype, device=device) + log_gate_shift)
    return q, k, v, beta, g
