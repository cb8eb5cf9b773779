"""SSD by chunks in batched PyTorch matmuls (Dao and Gu 2024, section 6): ``zoo.kernels.ssd``'s ``"chunked"``.

fla's ``chunk_simple_gla`` computes the same but refuses Hopper GPUs with Triton < 3.7.1. This form needs no loop
over time and no custom kernel; on a GPU it is the bar the Triton kernels' bf16 rounding is held to
(``tests/kernels/test_ssd.py``).

Precision, as in the reference kernels (mamba-ssm's ``mamba_chunk_scan_combined``, fla's chunked ops): with x in
bf16 or fp16, every matmul takes its operands in x's dtype and runs on tensor cores, accumulating in float32 (PyTorch
hands the result back in x's dtype). The cumulative log decays, their exps and the products that scale an operand
(C_t . B_s times the decay, B or C times a decay) stay float32 up to that operand's one cast, and the states are
carried from chunk to chunk in float32. With float32 x (CPU, fp32 runs) every step is float32. On an H200
(``python -m zoo.bench.step``, B=256, N=256, d_model=128, CUDA graphs) Mamba-2's training step went from 15.38 ms
(the earlier form: float32 einsums and permute copies) to 13.50 ms, 6.40x to 5.71x softmax attention's.

Layout: the heads go into the batch of every matmul, [Bt, H, nc, T, ...] flattened to [Bt H nc, T, ...], so each is
one bmm on contiguous operands: x is copied into that layout once and y out of it once; B and C, which the heads
share, enter the C B^T matmul as the strided views they are.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.backend import without_autocast

LOW_PRECISION = (torch.bfloat16, torch.float16)  # x dtypes whose matmuls run with operands in that dtype


@without_autocast  # the dtypes are chosen here: autocast would run the float32 matmuls in bf16
def ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                D: torch.Tensor | None = None, chunk: int = 64) -> torch.Tensor:
    """``ssd_naive``'s result by chunks of ``chunk`` steps, all in batched matmuls (no loop over time):
    the quadratic form inside each chunk, plus the states entering each chunk, which one decayed sum
    over earlier chunks' end states gives.

    x: [Bt, L, H, P]; dt: [Bt, L, H]; A: [H]; B, C: [Bt, L, N]; D: [H], the skip D_h x_t, or None
    -> y: [Bt, L, H, P] in x's dtype.
    """
    Bt, L, H, P = x.shape
    N = B.shape[-1]
    mm = x.dtype if x.dtype in LOW_PRECISION else torch.float32  # the matmul operands' dtype
    pad = -L % chunk
    if pad:
        x, dt, B, C = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, B, C))
    T, nc = chunk, x.shape[1] // chunk
    xh = x.reshape(Bt, nc, T, H, P).permute(0, 3, 1, 2, 4).contiguous().to(mm).view(-1, T, P)  # [Bt H nc, T, P]
    Bc, Cc = (t.to(mm).reshape(Bt * nc, T, N) for t in (B, C))  # [Bt nc, T, N]: views of the inputs in that dtype
    dt = dt.float().permute(0, 2, 1).reshape(Bt, H, nc, T)
    g = torch.cumsum(dt * A.float()[:, None, None], dim=-1)  # [Bt, H, nc, T]: log decay from the chunk's start
    # exp(g_t - g_s) dt_s where s <= t, else 0 (exp(-inf - g_s)): [Bt, H, nc, T (t), T (s)], mask and decay at once
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp(torch.where(causal, g[..., :, None], -torch.inf) - g[..., None, :]) * dt[..., None, :]
    scores = torch.bmm(Cc, Bc.transpose(1, 2)).view(Bt, 1, nc, T, T) * decay  # float32 (C_t . B_s) exp(g_t - g_s) dt_s
    if D is not None:  # the skip D_h x_t is the diagonal s = t of the same matmul
        scores.diagonal(dim1=-2, dim2=-1).add_(D.float()[:, None, None])
    y = torch.bmm(scores.to(mm).view(-1, T, T), xh)  # [Bt H nc, T, P]: within each chunk
    if nc > 1:  # one chunk carries no state in
        # state at the end of each chunk from its own inputs: sum_s exp(g_last - g_s) dt_s B_s x_s^T (decay's last row)
        Bw = (Bc.view(Bt, 1, nc, T, N) * decay[..., -1, :, None]).to(mm).view(-1, T, N)
        ends = torch.bmm(Bw.transpose(1, 2), xh).view(Bt * H, nc, N * P)  # each chunk's own end state
        # the state entering chunk i + 1 is ends[i] plus the state entering chunk i decayed through chunk i, carried
        # in float32: a loop of nc - 1 fused multiply-adds. (The same sum as one [nc, nc] x [nc, N P] matmul per head
        # fell to a slow float32 GEMM kernel on an H100: 1.5 ms of Mamba-2's 16 ms training step, the loop's steps
        # are memory-bound elementwise kernels.)
        chunk_decay = torch.exp(g[..., -1]).view(Bt * H, nc, 1)  # exp(log decay through each chunk)
        state = ends[:, 0].float()
        entering = [torch.zeros_like(ends[:, 0]), state.to(mm)]
        for i in range(1, nc - 1):
            state = torch.addcmul(ends[:, i].float(), chunk_decay[:, i], state)
            entering.append(state.to(mm))
        Cw = (Cc.view(Bt, 1, nc, T, N) * torch.exp(g)[..., None]).to(mm).view(-1, T, N)  # C_t exp(g_t)
        y = torch.baddbmm(y, Cw, torch.stack(entering, 1).view(-1, N, P))
    return y.view(Bt, H, nc * T, P)[:, :, :L].transpose(1, 2).contiguous().to(x.dtype)
