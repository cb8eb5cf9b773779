"""SSD by chunks in batched PyTorch matmuls (Dao and Gu 2024, section 6): the GPU path of ``zoo.kernels.ssd``.

fla's ``chunk_simple_gla`` computes the same but refuses Hopper GPUs with Triton < 3.7.1, so zoo keeps
this form, which needs no loop over time and no custom kernel.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.kernels.backend import without_autocast


@without_autocast  # float32 inside, as the casts say: under bf16 autocast the einsums would run in bf16
def ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                chunk: int = 64) -> torch.Tensor:
    """``ssd_naive``'s result by chunks of ``chunk`` steps, all in batched matmuls (no loop over time):
    the quadratic form inside each chunk, plus the states entering each chunk, which one decayed sum
    over earlier chunks' end states gives.

    x: (Bt, L, H, P); dt: (Bt, L, H); A: (H,); B, C: (Bt, L, N) -> (Bt, L, H, P).
    """
    Bt, L, H, P = x.shape
    pad = -L % chunk
    if pad:
        x, dt, B, C = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, B, C))
    nc = x.shape[1] // chunk
    xdt = (x.float() * dt.float()[..., None]).view(Bt, nc, chunk, H, P)
    B, C = B.float().view(Bt, nc, chunk, -1), C.float().view(Bt, nc, chunk, -1)
    g = torch.cumsum((dt.float() * A.float()).view(Bt, nc, chunk, H), dim=2).permute(0, 1, 3, 2)  # (Bt, nc, H, T)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp((g[..., :, None] - g[..., None, :]).masked_fill(~causal, -torch.inf))  # (Bt, nc, H, T, T)
    scores = torch.einsum("bctn,bcsn->bcts", C, B)[:, :, None] * decay
    y = torch.einsum("bchts,bcshp->bcthp", scores, xdt)
    # state at the end of each chunk from its own inputs: sum_s exp(g_last - g_s) B_s (dt_s x_s)^T
    ends = torch.einsum("bchs,bcsn,bcshp->bchnp", torch.exp(g[..., -1:] - g), B, xdt)
    # state entering chunk c: sum_{c' < c} exp(total decay of chunks c'+1 .. c-1) ends[c']
    last = F.pad(torch.cumsum(g[..., -1], dim=1), (0, 0, 1, 0))  # (Bt, nc+1, H): decay up to each chunk start
    earlier = torch.ones(nc, nc, dtype=torch.bool, device=x.device).tril(-1)
    between = (last[:, :-1, None] - last[:, None, 1:]).permute(0, 3, 1, 2)  # (Bt, H, c, c'): start c minus end c'
    weights = torch.exp(between.masked_fill(~earlier, -torch.inf))
    entering = torch.einsum("bhij,bjhnp->bihnp", weights, ends)
    y = y + torch.einsum("bctn,bcht,bchnp->bcthp", C, torch.exp(g), entering)
    return y.reshape(Bt, nc * chunk, H, P)[:, :L].to(x.dtype)
