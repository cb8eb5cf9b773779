"""``python -m zoo.kernels.bench``: GatedFWA kernels against the strongest peers, timed in one process.

Rows per attention shape (forward and forward+backward, ms and TFLOP/s of the windowed work): ours; ours with the
gate off; FlexAttention (``torch.compile``d, score_mod adding ``u_i - u_j``, sliding-window block mask);
flash-linear-attention ``parallel_attn(g=-alpha, window_size=w)``; SDPA full causal attention without gate (a speed
reference). Then each of our attention kernels per launch choice (block sizes, warps, stages; the table's first),
timed in a CUDA graph. Then the preprocessing scan against eager and compiled PyTorch, in GB/s next to a
device-to-device copy. Then the linear recurrences (the gated and ungated delta rule, RWKV-7), forward+backward in
float32 on every backend of their entries: the PyTorch recurrence, the chunked PyTorch form, fla's kernels where
they work, and our Triton kernel where there is one (RWKV-7). Then RWKV-7's Triton recurrence for every launch
choice (value columns per program, warps) next to the chunked form, in bf16, and its chunked kernels each alone at
several launches; Mamba's selective scan for every launch choice (channels per program, warps, pipelining stages)
next to mamba-ssm's ``selective_scan_fn`` where it imports; Mamba-2's SSD in our Triton kernels for a few launch
choices next to the chunked form (compiled and eager) and mamba-ssm's ``mamba_chunk_scan_combined`` where it
imports; RWKV-4's WKV for every launch choice next to fla's ``fused_recurrent_rwkv4``; the depthwise causal short
conv against PyTorch's grouped conv1d, Hyena's gated long conv fused around its FFTs against the unfused
composition, and the training loss (cross-entropy over the vocabulary at the labelled rows) against PyTorch's and
fla's fused one, the tied head and that loss as one op against the two apart, the residual stream's LayerNorm and
the residual add fused into it against PyTorch's, causal softmax attention past the fused kernels' head dims (the
dense form) against SDPA, attention from the labelled rows (zoo's Triton kernels) against SDPA with a mask, a
biased projection (its forward a streaming Triton matmul, its bias gradient a Triton column sum) against
``F.linear``, attention's q, k, v projection with its parts' gradients packed in one pass against
the projection viewed and unbound, and three timed from a CUDA graph of many calls as in a training step: RWKV-7's
projections of its token-shift mixes folded into one matmul against the mixes made first, the embedding's weight
gradient against PyTorch's, and the column sums' last step (``sum_rows`` of the per-program partial sums) against
PyTorch's ``sum``.

    python -m zoo.kernels.bench --shapes 1,16,65536,64,512 256,2,512,64,256 --attention-blocks 256,2,512,64,256 \
        --dtype bf16 --recurrences 128,128,2,64 --rwkv7 256,256,2,64 128,512,2,64 --rwkv7-kernels 256,256,2,64 \
        --selective-scan 256,256,256,16 --ssd 256,256,4,64,128 --wkv4 256,256,128 \
        128,512,512 --short-conv 256,256,384,3 --gated-long-conv 256,256,128 128,512,64 --cross-entropy 4096,8192 \
        --linear-cross-entropy 4096,128,8192 --layer-norm 65536,128 --linear 65536,128,384 \
        --head-parts 256,256,128,1 128,512,512,8 --softmax-attention 128,512,1,512 256,256,1,256 \
        --attention-rows 256,256,16,1,128 256,256,16,2,64 \
        --shifted-linear 256,256,128,160 128,512,512,288 --embedding 256,256,128 128,512,512 \
        --sum-rows 1,176,384 2,528,128 1,1024,1536

Those are the defaults: with no option every section runs. A section given empty ('' or no shape) is skipped, and
once any section is given shapes only the sections given run (``--rwkv7 256,256,2,64``: RWKV-7's alone).
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

from zoo.kernels import delta_rule as delta_rule_op
from zoo.kernels.attention import attention_at_rows, softmax_attention
from zoo.kernels import rwkv7 as rwkv7_op
from zoo.kernels.cross_entropy import cross_entropy
from zoo.kernels.layer_norm import add_layer_norm, layer_norm
from zoo.kernels.linear import head_parts, linear
from zoo.kernels.linear_cross_entropy import linear_cross_entropy
from zoo.kernels.backend import FLA_CHUNK_MODULES_BROKEN_ON_HOPPER, fla_chunks_unreliable, optional_import
from zoo.kernels.embedding.sorted_sum import embedding_backward
from zoo.kernels.gatedfwa import gate_cumsum, gated_window_attention
from zoo.kernels.gatedfwa.attention import KERNELS as ATTENTION_KERNELS, Blocks, attention_bwd, attention_fwd, \
    default_blocks, log2_gate
from zoo.kernels.gatedfwa.naive import gate_cumsum_ref
from zoo.kernels.long_conv import gated_long_conv
from zoo.kernels.partial_sums import sum_rows
from zoo.kernels.rwkv7 import chunk as rwkv7_chunks
from zoo.kernels.rwkv7.chunk import Launch as Rwkv7ChunkLaunch, rwkv7_chunk
from zoo.kernels.rwkv7.fused_recurrent import Launch as Rwkv7Launch, rwkv7_fused
from zoo.kernels.stored_states import STATES as STORED_STATES
from zoo.kernels.selective_scan import selective_scan as selective_scan_entry
from zoo.kernels.selective_scan.fused_recurrent import Launch, selective_scan
from zoo.kernels.shifted_linear import shifted_linear
from zoo.kernels.short_conv import short_conv
from zoo.kernels.token_shift import token_shift_mix
from zoo.kernels.wkv4.fused_recurrent import Launch as Wkv4Launch, wkv4 as wkv4_fused
from zoo.kernels.ssd import ssd
from zoo.kernels.ssd.fused import LAUNCH as SSD_LAUNCH, ssd_fused

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def timed(fn, grads=(), repeats: int = 3):
    """Milliseconds of fn() on the GPU, clearing grads between calls: the lowest of ``repeats`` medians of triton's
    ``do_bench`` (100 ms each). One median alone was once 50% above a repeat of the same launch in the same process;
    a transient like that now has to strike every repeat to show in a row."""
    from triton.testing import do_bench
    return min(do_bench(fn, warmup=25, rep=100, grad_to_none=list(grads)) for _ in range(repeats))


def failed(err: Exception) -> str:
    """A peer's row when it raised: the error's kind and first line, so the other rows still print."""
    first_line = (str(err).splitlines() or [""])[0]
    return f"failed: {type(err).__name__}: {first_line[:90]}"


def timed_pair(fwd, grad, leaves):
    """(forward ms, forward + backward ms) of ``fwd()``, the backward seeded with ``grad``, clearing the leaves'
    grads between calls."""
    return timed(fwd), timed(lambda: fwd().backward(grad), leaves)


def under_autocast(fn):
    """``fn`` called under CUDA bf16 autocast, as training calls it."""
    def call():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return fn()
    return call


def print_pairs(rows):
    """One line per row of ``timed_pair`` results (or a reason the row did not run), under a header."""
    width = max([44, *map(len, rows)])
    print(f"{'':{width}s} {'fwd ms':>9s} {'fwd+bwd ms':>11s}")
    for name, row in rows.items():
        print(f"{name:{width}s} " + (row if isinstance(row, str) else f"{row[0]:9.3f} {row[1]:11.3f}"))


def band_pairs(T: int, window: int) -> int:
    """Number of (query, key) pairs inside the causal window."""
    w = min(window, T)
    return w * (w + 1) // 2 + (T - w) * w


def attention_rows(B, H, T, D, window, dtype):
    """{name: (fwd ms, fwd+bwd ms)} for one shape; a peer that cannot run gets its reason instead."""
    dev = "cuda"
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, T, H, D, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
    h = torch.randn(B, T, H, device=dev)
    beta = torch.rand(B, T, H, device=dev) + 0.5
    alpha = (F.softplus(beta * h) / beta).requires_grad_()
    u = gate_cumsum(h, beta).detach().requires_grad_()
    do = torch.randn_like(q)

    rows = {}
    rows["ours"] = timed_pair(lambda: gated_window_attention(q, k, v, u, window), do, (q, k, v, u))
    rows["ours, gate off"] = timed_pair(lambda: gated_window_attention(q, k, v, None, window), do, (q, k, v))

    qt, kt, vt = (x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
    do_t = do.transpose(1, 2).contiguous()
    ut = u.detach().transpose(1, 2).contiguous().requires_grad_()

    def sdpa_fwd():
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)

    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def in_window(b, hh, qi, kj):
            return (kj <= qi) & (qi - kj < window)

        block_mask = create_block_mask(in_window, None, None, T, T, device=dev)

        @torch.compile
        def flex_gated(q_, k_, v_, u_):
            u_keys = u_.clone()  # flex cannot differentiate one tensor indexed twice in a score_mod

            def gate_bias(score, b, hh, qi, kj):
                return score + u_[b, hh, qi] - u_keys[b, hh, kj]
            return flex_attention(q_, k_, v_, score_mod=gate_bias, block_mask=block_mask)

        def flex_fwd():
            return flex_gated(qt, kt, vt, ut)
        rows["FlexAttention"] = timed_pair(flex_fwd, do_t, (qt, kt, vt, ut))
    except Exception as err:  # a peer failing must not hide the other rows
        rows["FlexAttention"] = failed(err)

    fla_attn = optional_import("fla.ops.attn", "zoo.kernels.bench skips the fla parallel_attn row")
    if fla_attn is None:
        rows["fla parallel_attn"] = "skipped: flash-linear-attention (fla.ops.attn) not importable"
    else:
        try:
            rows["fla parallel_attn"] = timed_pair(
                lambda: fla_attn.parallel_attn(q, k, v, g=-alpha, window_size=window), do, (q, k, v, alpha))
        except Exception as err:  # e.g. out of shared memory at head dim 256 (fla 0.6.0, H200)
            rows["fla parallel_attn"] = failed(err)
    rows["SDPA causal, full, no gate"] = timed_pair(sdpa_fwd, do_t, (qt, kt, vt))
    return rows


# launches of the window attention's kernels tried beside the table's: (m, n, warps, stages), each a tiling the
# kernel accepts (``Blocks``); those that do not fit a GPU's shared memory at a head dim print as failed
ATTENTION_LAUNCHES = {
    "fwd": [(64, 32, 4, 3), (64, 32, 4, 2), (64, 32, 4, 1), (32, 32, 4, 2), (64, 64, 4, 2), (128, 64, 8, 2),
            (128, 32, 4, 2), (64, 16, 4, 2)],
    "dkdv": [(64, 64, 4, 2), (32, 64, 4, 2), (16, 64, 4, 3), (32, 32, 4, 2), (16, 32, 4, 2), (64, 128, 8, 2),
             (32, 32, 4, 3)],
    "dq": [(64, 32, 4, 2), (64, 16, 4, 2), (32, 32, 4, 2), (64, 64, 4, 2), (128, 32, 8, 2), (32, 16, 4, 2),
           (64, 32, 4, 3)],
}


def attention_blocks_rows(B, H, T, D, window, dtype):
    """{kernel: {launch: us or why not}} of the gated window attention's kernels per launch, the table's first
    (:func:`default_blocks`): the forward alone, and the whole backward (delta, dK/dV, dQ) with the named kernel's
    launch varied and the other at the table's. Timed in a CUDA graph (:func:`graph_timed_us`), so the host's
    launch time, which dominates the small shapes under ``do_bench``, stays out."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, T, H, D, device="cuda", dtype=dtype) for _ in range(3))
    u = log2_gate(gate_cumsum(torch.randn(B, T, H, device="cuda"), torch.ones(B, T, H, device="cuda")))
    do, scale = torch.randn_like(q), D ** -0.5
    o, lse = attention_fwd(q, k, v, u, window, scale)
    calls = {"fwd": lambda blocks: attention_fwd(q, k, v, u, window, scale, blocks),
             "dkdv": lambda blocks: attention_bwd(q, k, v, u, o, lse, do, window, scale, dkdv_blocks=blocks),
             "dq": lambda blocks: attention_bwd(q, k, v, u, o, lse, do, window, scale, dq_blocks=blocks)}
    rows = {}
    for kernel in ATTENTION_KERNELS:
        table = default_blocks(kernel, D, q.device)
        rows[kernel] = {}
        for blocks in dict.fromkeys([table, *(Blocks(*launch) for launch in ATTENTION_LAUNCHES[kernel])]):
            name = f"{blocks.m:>3d} x {blocks.n:<3d} {blocks.warps} warps {blocks.stages} stages" + \
                (" (table)" if blocks == table else "")
            try:
                rows[kernel][name] = graph_timed_us(lambda: calls[kernel](blocks), calls=20)
            except Exception as err:  # e.g. out of shared memory at head dim 256
                rows[kernel][name] = failed(err)
    return rows


def scan_rows(T, H, dtype=torch.float32):
    """{name: (ms, GB/s)} of the preprocessing forward on (1, T, H), next to a device copy."""
    h = torch.randn(1, T, H, device="cuda", dtype=dtype)
    beta = torch.rand(1, T, H, device="cuda", dtype=dtype) + 0.5
    moved = 2 * h.numel() * h.element_size() + h.numel() * 4
    compiled = torch.compile(gate_cumsum_ref)
    rows = {}
    for name, fn in [("ours (Triton)", lambda: gate_cumsum(h, beta)),
                     ("eager PyTorch", lambda: gate_cumsum_ref(h, beta)),
                     ("torch.compile", lambda: compiled(h, beta))]:
        ms = timed(fn)
        rows[name] = (ms, moved / ms / 1e6)
    hg, bg = h.clone().requires_grad_(), beta.clone().requires_grad_()
    uu = gate_cumsum(hg, bg)
    du = torch.randn_like(uu)
    ms = timed(lambda: torch.autograd.grad(uu, (hg, bg), du, retain_graph=True))
    rows["ours backward (reads h, beta, du; writes dh, dbeta)"] = (ms, (2 * moved + h.numel() * 4) / ms / 1e6)
    src = torch.empty(moved // 8, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src))
    rows["device copy (same bytes)"] = (ms, 2 * src.numel() * 4 / ms / 1e6)
    return rows


# the RWKV-7 layer's bound on its log decays, w = -exp(-0.5) sigmoid(.) (zoo.mixers.rwkv7.W_SCALE)
RWKV7_W_MIN = -math.exp(-0.5)


def rwkv7_gates(B, T, H, K, dtype=torch.float32):
    """RWKV-7's w, a, b leaves on the GPU, shaped as the layer makes them: log decays in (RWKV7_W_MIN, 0), a = -kk
    and b = kk * iclr with kk a unit key and iclr in (0, 1)."""
    dev = "cuda"
    w = RWKV7_W_MIN * torch.sigmoid(torch.randn(B, T, H, K, device=dev))
    kk = F.normalize(torch.randn(B, T, H, K, device=dev), dim=-1)
    b = kk * torch.rand(B, T, H, K, device=dev)
    return [x.to(dtype).detach().requires_grad_() for x in (w, -kk, b)]


def recurrence_rows(B, T, H, K):
    """{op: {backend: fwd+bwd ms, or why it did not run}} for the delta rule (gated, ungated) and RWKV-7."""
    dev = "cuda"
    torch.manual_seed(0)

    def leaf(*shape, fn=lambda x: x):
        return fn(torch.randn(*shape, device=dev)).detach().requires_grad_()

    q, k, v = leaf(B, T, H, K), leaf(B, T, H, K, fn=lambda x: F.normalize(x, dim=-1)), leaf(B, T, H, K)
    beta, g = leaf(B, T, H, fn=torch.sigmoid), leaf(B, T, H, fn=F.logsigmoid)
    w, a, b = rwkv7_gates(B, T, H, K)
    ops = {
        "delta rule, gated": (delta_rule_op.BACKENDS, "fla.ops.gated_delta_rule",
                              lambda bk: delta_rule_op.delta_rule(q, k, v, beta, g, backend=bk), (q, k, v, beta, g)),
        "delta rule": (delta_rule_op.BACKENDS, "fla.ops.delta_rule",
                       lambda bk: delta_rule_op.delta_rule(q, k, v, beta, backend=bk), (q, k, v, beta)),
        "rwkv7": (rwkv7_op.BACKENDS, "fla.ops.rwkv7",
                  lambda bk: rwkv7_op.rwkv7(q, w, k, v, a, b, w_min=RWKV7_W_MIN, backend=bk), (q, w, k, v, a, b)),
    }
    broken = fla_chunks_unreliable(torch.cuda.current_device())
    rows = {}
    for op, (backends, fla_module, call, leaves) in ops.items():
        rows[op] = {}
        for backend in backends:
            if backend == "auto":
                continue
            if backend == "fla" and fla_module in FLA_CHUNK_MODULES_BROKEN_ON_HOPPER and broken:
                rows[op][backend] = f"skipped: {broken}"
                continue
            try:
                out = call(backend)
                grad = torch.randn_like(out)
                rows[op][backend] = timed(lambda: call(backend).backward(grad), leaves)
            except Exception as err:  # a backend that cannot run here (missing package, no backward) gets a reason
                rows[op][backend] = failed(err)
    return rows


RWKV7_LAUNCHES = [Rwkv7Launch(block_v, warps) for block_v in (16, 32, 64) for warps in (1, 2, 4)]
# the chunked kernels: the default, the chains' columns and warps, the key side's gradients' key columns and warps,
# T in float32 on the chains' warps, every matmul in float32, the states kept in float32
RWKV7_CHUNK_LAUNCHES = list(dict.fromkeys([
    Rwkv7ChunkLaunch(), Rwkv7ChunkLaunch(states_dtype=torch.float32),
    *(Rwkv7ChunkLaunch(block_v, warps) for block_v in (32, 64) for warps in (1, 2, 4)),
    *(Rwkv7ChunkLaunch(grads_block_k=block_k, grads_warps=warps) for block_k in (16, 32, 64) for warps in (2, 4, 8)),
    *(Rwkv7ChunkLaunch(grads_block_v=block_v) for block_v in (16, None)),
    Rwkv7ChunkLaunch(inverse_precision="ieee", intra_warps=None), Rwkv7ChunkLaunch(precision="ieee")]))


STATE_WORDS = {torch.float32: "float32", torch.bfloat16: "bf16"}


def chunk_launch_name(launch) -> str:
    """A chunked RWKV-7 launch in a row's words."""
    return (f"ours chunked {launch.block_v:>2d} columns, {launch.num_warps} warps, {launch.precision}; T "
            f"{launch.inverse_precision}, {launch.warps('intra_warps')}; grads {launch.grads_block_k} keys, "
            f"{launch.warps('grads_warps')}, {launch.grads_block_v or 'all'} values; "
            f"{STATE_WORDS[launch.states_dtype]} states")


def rwkv7_rows(B, T, H, K):
    """{launch: (fwd ms, fwd+bwd ms)} of our Triton RWKV-7 recurrence per launch choice, the default first, then each
    stored-states mode by name at the default launch, of the chunked PyTorch form, and of our chunked Triton kernels
    per launch; bf16 inputs (``rwkv7_gates``)."""
    dev = "cuda"
    torch.manual_seed(0)
    r, k, v = (torch.randn(B, T, H, K, device=dev).to(torch.bfloat16).requires_grad_() for _ in range(3))
    w, a, b = rwkv7_gates(B, T, H, K, torch.bfloat16)
    leaves = (r, w, k, v, a, b)
    grad = torch.randn(B, T, H, K, device=dev)
    rows = {}
    for launch in dict.fromkeys([Rwkv7Launch(), *RWKV7_LAUNCHES]):
        rows[f"ours {launch.block_v:>2d} columns, {launch.num_warps} warps"] = timed_pair(
            lambda: rwkv7_fused(*leaves, launch=launch), grad, leaves)
    for states in STORED_STATES[1:]:
        launch = Rwkv7Launch(states=states)
        rows[f"ours, {states} states"] = timed_pair(lambda: rwkv7_fused(*leaves, launch=launch), grad, leaves)
    half_bytes = Rwkv7Launch(states_dtype=torch.bfloat16)
    rows["ours, bf16 states"] = timed_pair(lambda: rwkv7_fused(*leaves, launch=half_bytes), grad, leaves)
    rows["chunked PyTorch form"] = timed_pair(lambda: rwkv7_op.rwkv7(*leaves, backend="chunked"), grad, leaves)
    for launch in RWKV7_CHUNK_LAUNCHES:
        rows[chunk_launch_name(launch)] = timed_pair(lambda: rwkv7_chunk(*leaves, launch=launch), grad, leaves)
    return rows


# each chunked kernel alone: T's precision and warps; the chains' value columns and warps (both chains the same
# launches); the key side's gradients' key columns, warps and value columns at a time; the chains and the key side's
# gradients with the states kept in float32
RWKV7_CHAIN_LAUNCHES = [*(Rwkv7ChunkLaunch(block_v, warps)
                          for block_v, warps in ((64, 1), (64, 2), (64, 4), (64, 8), (32, 2), (32, 4))),
                        Rwkv7ChunkLaunch(states_dtype=torch.float32)]
RWKV7_KERNEL_LAUNCHES = {
    "T": [Rwkv7ChunkLaunch(inverse_precision=precision, intra_warps=warps)
          for precision in ("tf32x3", "ieee") for warps in (1, 2, 4)],
    "chain forward + O": RWKV7_CHAIN_LAUNCHES,
    "chain reverse + dV": RWKV7_CHAIN_LAUNCHES,
    "key side's grads": [*(Rwkv7ChunkLaunch(grads_block_k=block_k, grads_warps=warps, grads_block_v=block_v)
                           for block_k in (16, 32, 64) for warps in (1, 2, 4, 8) for block_v in (32, None)),
                         *(Rwkv7ChunkLaunch(grads_block_k=block_k, grads_warps=warps, grads_block_v=16)
                           for block_k, warps in ((64, 4), (64, 2), (32, 2), (32, 1))),
                         Rwkv7ChunkLaunch(states_dtype=torch.float32)],
}


def rwkv7_kernel_rows(B, T, H, K):
    """{(kernel, launch in words): ms} of each chunked RWKV-7 kernel alone (``zoo.kernels.rwkv7.chunk``'s one
    function per kernel), the key side's gradients on the buffers the default launch makes (in the launch's states
    dtype); bf16 inputs (``rwkv7_gates``), float32 dO."""
    dev = "cuda"
    torch.manual_seed(0)
    r, k, v = (torch.randn(B, T, H, K, device=dev).to(torch.bfloat16) for _ in range(3))
    w, a, b = (x.detach() for x in rwkv7_gates(B, T, H, K, torch.bfloat16))
    do = torch.randn(B, T, H, K, device=dev)
    xs = (r, w, k, v, a, b)
    inverses = rwkv7_chunks.chunk_inverses(*xs)
    kept = {}  # states dtype -> the chains' (states, dstates, SA, dY)
    for dtype in STATE_WORDS:
        launch = rwkv7_chunks.LAUNCH._replace(states_dtype=dtype)
        _, states, SA = rwkv7_chunks.forward_chain(*xs, inverses, launch)
        _, dstates, dY = rwkv7_chunks.reverse_chain(*xs, do, inverses, launch)
        kept[dtype] = states, dstates, SA, dY
    calls = {"T": lambda launch: rwkv7_chunks.chunk_inverses(*xs, launch),
             "chain forward + O": lambda launch: rwkv7_chunks.forward_chain(*xs, inverses, launch),
             "chain reverse + dV": lambda launch: rwkv7_chunks.reverse_chain(*xs, do, inverses, launch),
             "key side's grads": lambda launch: rwkv7_chunks.key_grads(*xs, do, *kept[launch.states_dtype], launch)}
    def chain_words(launch):
        return f"{launch.block_v} columns, {launch.num_warps} warps, {STATE_WORDS[launch.states_dtype]} states"

    words = {"T": lambda launch: f"{launch.inverse_precision}, {launch.warps('intra_warps')} warps",
             "chain forward + O": chain_words, "chain reverse + dV": chain_words,
             "key side's grads": lambda launch: f"{launch.grads_block_k} keys, {launch.warps('grads_warps')} warps, "
                                                f"{launch.grads_block_v or 'all'} values at a time, "
                                                f"{STATE_WORDS[launch.states_dtype]} states"}
    rows = {}
    for kernel, launches in RWKV7_KERNEL_LAUNCHES.items():
        for launch in launches:
            name = words[kernel](launch) + (" (default)" if launch == rwkv7_chunks.LAUNCH else "")
            rows[kernel, name] = timed(lambda: calls[kernel](launch))
    return rows


# the default (the backward's channels per program by the launch's size), then "auto" (the mode the state budget
# picks) with the backward at 16, 32 and 64 channels and 1 and 2 warps (4 warps and 2 pipelining stages were slower or
# the same wherever measured), then each mode by name at the default channels, also where "auto" picks another one
# (as at the grid's Mamba runs at d_model=512), then the forward at other channels and warps
FORWARD_LAUNCHES = ((32, 1), (64, 1), (128, 2), (64, 4))
SCAN_LAUNCHES = ([Launch(block_e, warps) for block_e in (16, 32, 64) for warps in (1, 2)]
                 + [Launch(None, 1, 1, states) for states in STORED_STATES[1:]] + [Launch(states_dtype=torch.bfloat16)]
                 + [Launch(forward_block_e=block_e, forward_warps=warps) for block_e, warps in FORWARD_LAUNCHES])


def selective_scan_rows(Bt, L, E, N):
    """{launch: (fwd ms, fwd+bwd ms)} of our Triton selective scan with Mamba's options (bf16 u, dt, z, B, C; float32
    A, D, dt bias; softplus), per launch choice, the default first; and mamba-ssm's ``selective_scan_fn`` where it
    imports."""
    dev = "cuda"
    torch.manual_seed(0)

    def leaf(*shape, scale=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, device=dev) * scale).to(dtype).requires_grad_()

    u, dt, z = leaf(Bt, L, E), leaf(Bt, L, E, scale=0.5), leaf(Bt, L, E)
    B, C = leaf(Bt, L, N), leaf(Bt, L, N)
    A = (-torch.rand(E, N, device=dev) * N).requires_grad_()
    D, bias = leaf(E, dtype=torch.float32), (torch.rand(E, device=dev) - 4).requires_grad_()
    leaves = (u, dt, z, B, C, A, D, bias)
    grad = torch.randn(Bt, L, E, device=dev)

    rows = {}
    for launch in dict.fromkeys([Launch(), *SCAN_LAUNCHES]):
        channels = "auto" if launch.block_e is None else f"{launch.block_e:>2d}"
        name = (f"ours fwd {launch.forward_block_e} ch {launch.forward_warps} warps, bwd {channels} ch "
                f"{launch.num_warps} warps, {launch.num_stages} stages, {launch.states} states"
                f"{' (bf16)' if launch.states_dtype == torch.bfloat16 else ''}")
        rows[name] = timed_pair(lambda: selective_scan(u, dt, A, B, C, D, z, bias, True, launch=launch), grad, leaves)
    try:
        rows["mamba-ssm selective_scan_fn"] = timed_pair(
            lambda: selective_scan_entry(u, dt, A, B, C, D, z, bias, True, backend="mamba_ssm"), grad, leaves)
    except ImportError as err:
        rows["mamba-ssm selective_scan_fn"] = f"not run: {err}"
    return rows


# launch choices of the SSD kernels tried beside the default (``zoo.kernels.ssd.fused.LAUNCH``): kernel -> (warps, stages)
SSD_LAUNCHES = [{"dx": (8, 1)}, {"dbc": (8, 1)}, {"dbc": (4, 1)}, {"fwd": (8, 1), "dstate": (8, 1)}]


def ssd_rows(Bt, L, H, P, N):
    """{name: (fwd ms, fwd+bwd ms)} of Mamba-2's SSD as its layer calls it under bf16 autocast (bf16 x and B, C
    strided views of one conv output; float32 dt, A, D): our Triton kernels for each launch choice, the default
    first; the chunked form compiled (the GPU path before the kernels) and eager; mamba-ssm's
    ``mamba_chunk_scan_combined`` where it imports."""
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(Bt, L, H, P, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dt = (torch.rand(Bt, L, H, device=dev) * 0.1 + 0.01).requires_grad_()
    A = (-torch.rand(H, device=dev) * 8 - 1).requires_grad_()
    xbc = torch.randn(Bt, L, H * P + 2 * N, device=dev, dtype=torch.bfloat16)
    B = xbc[..., H * P:H * P + N].detach().requires_grad_()
    C = xbc[..., H * P + N:].detach().requires_grad_()
    D = torch.ones(H, device=dev, requires_grad=True)
    leaves = (x, dt, A, B, C, D)
    grad = torch.randn(Bt, L, H, P, device=dev, dtype=torch.bfloat16)

    rows = {}
    for launch in [{}, *SSD_LAUNCHES]:
        chosen = {**SSD_LAUNCH, **launch}
        name = "ours " + ", ".join(f"{k} {w}w{s}s" for k, (w, s) in chosen.items())
        rows[name] = timed_pair(under_autocast(lambda: ssd_fused(x, dt, A, B, C, D, launch=launch)), grad, leaves)
    for backend, name in (("compiled", "chunked form, compiled"), ("chunked", "chunked form, eager")):
        rows[name] = timed_pair(under_autocast(lambda: ssd(x, dt, A, B, C, D, backend=backend)), grad, leaves)
    mamba_ssm = optional_import("mamba_ssm.ops.triton.ssd_combined", "the SSD bench's mamba-ssm row")
    if mamba_ssm is None:
        rows["mamba-ssm mamba_chunk_scan_combined"] = "not run: mamba-ssm does not import"
    else:
        rows["mamba-ssm mamba_chunk_scan_combined"] = timed_pair(under_autocast(
            lambda: mamba_ssm.mamba_chunk_scan_combined(x, dt, A, B[:, :, None], C[:, :, None], 64, D=D)),
            grad, leaves)
    return rows


# the default (channels per program by the launch's size, one warp), then 32, 64 and 128 channels at 1, 2 and 4 warps
# (64 channels and 4 warps: the launch before the rule)
WKV4_LAUNCHES = [Wkv4Launch(block_c, warps) for block_c in (32, 64, 128) for warps in (1, 2, 4)]


def wkv4_rows(B, L, C):
    """{name: (fwd ms, fwd+bwd ms)} of RWKV-4's WKV as the mixer calls it (bf16 k, v and receptance r, float32
    decay w and bonus u; the gate sigmoid(r) y in bf16): ours per launch choice, the default first; then without
    the gate beside fla's ``fused_recurrent_rwkv4`` (no gate; w as its log, which it exponentiates itself) where
    fla imports."""
    dev = "cuda"
    torch.manual_seed(0)
    k, v, r = (torch.randn(B, L, C, device=dev).to(torch.bfloat16).requires_grad_() for _ in range(3))
    log_w = torch.linspace(-5, 3, C, device=dev)  # RWKV's time_decay schedule, w = exp(time_decay)
    w, u = log_w.exp().requires_grad_(), torch.randn(C, device=dev).requires_grad_()
    leaves = (w, u, k, v, r)
    grad = torch.randn(B, L, C, device=dev).to(torch.bfloat16)
    rows = {}
    for launch in dict.fromkeys([Wkv4Launch(), *WKV4_LAUNCHES]):
        channels = "auto" if launch.block_c is None else f"{launch.block_c:>3d}"
        rows[f"ours {channels} channels, {launch.num_warps} warps"] = timed_pair(
            lambda: wkv4_fused(w, u, k, v, r, torch.bfloat16, launch), grad, leaves)
    rows["ours, no gate"] = timed_pair(lambda: wkv4_fused(w, u, k, v), grad.float(), leaves[:4])
    fla = optional_import("fla.ops.rwkv4", "the WKV bench's fla row")
    if fla is None:
        rows["fla fused_recurrent_rwkv4, no gate"] = "not run: fla does not import"
    else:
        fla_w = log_w.clone().requires_grad_()
        state = torch.zeros(B, 3, 1, C, device=dev)
        rows["fla fused_recurrent_rwkv4, no gate"] = timed_pair(
            lambda: fla.fused_recurrent_rwkv4(fla_w, u, k, v, state)[0], grad, (fla_w, u, k, v))
    return rows


def short_conv_rows(B, T, C, K):
    """{"backend, activation": (fwd ms, fwd+bwd ms)} of the depthwise causal conv (bf16 input, float32 weights), plain
    (Hyena, BASED) and with the silu Mamba, Mamba-2 and DeltaNet fuse into it: ours and PyTorch's grouped conv1d
    (cuDNN) with the transposes a (B, T, C) layout needs. Timed in a CUDA graph (:func:`graph_timed_pair`), as a
    training step runs them: eagerly, this op's autograd and launches from Python took longer than its kernels, so
    ``do_bench`` timed the host (an H100, B=256, T=256, C=256, silu: 0.53 ms a forward + backward by ``do_bench``,
    0.145 ms in a CUDA graph)."""
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(B, T, C, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(C, K, device=dev, requires_grad=True)
    b = torch.randn(C, device=dev, requires_grad=True)
    grad = torch.randn(B, T, C, device=dev, dtype=torch.bfloat16)
    rows = {}
    for activation in (None, "silu"):
        for backend in ("triton", "naive"):
            call = under_autocast(lambda: short_conv(x, w, b, activation=activation, backend=backend))
            rows[f"{backend}, {activation or 'no activation'}"] = graph_timed_pair(call, grad, (x, w, b))
    return rows


def gated_long_conv_rows(B, L, D):
    """{backend: (fwd ms, fwd+bwd ms)} of Hyena's gated long conv under bf16 autocast (bf16 xbc [B, L, 3D], float32
    filter [L, D] and skip [D], as in training): ours, fused around the FFTs, and the unfused composition."""
    dev = "cuda"
    torch.manual_seed(0)
    xbc = torch.randn(B, L, 3 * D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    h = (torch.randn(L, D, device=dev) * L ** -0.5).requires_grad_()
    bias = torch.randn(D, device=dev, requires_grad=True)
    grad = torch.randn(B, L, D, device=dev, dtype=torch.bfloat16)
    rows = {}
    for backend in ("triton", "naive"):
        rows[backend] = timed_pair(under_autocast(lambda: gated_long_conv(xbc, h, bias, backend=backend)), grad,
                                   (xbc, h, bias))
    return rows


def cross_entropy_rows(R, V):
    """{name: (fwd ms, fwd+bwd ms)} of the mean cross-entropy of bf16 logits [R, V] over labelled rows (one in eight
    unlabelled): ours, PyTorch's on the float32 cast (the reference), and fla's ``FusedCrossEntropyLoss`` where it
    imports."""
    dev = "cuda"
    torch.manual_seed(0)
    logits = torch.randn(R, V, device=dev, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, V, (R,), device=dev)
    targets[::8] = -100
    one = torch.ones((), device=dev)
    rows = {name: timed_pair(lambda: cross_entropy(logits, targets, backend=name), one, (logits,))
            for name in ("triton", "naive")}
    fla_modules = optional_import("fla.modules", "fla's fused cross-entropy in the kernel bench")
    if fla_modules is None:
        rows["fla FusedCrossEntropyLoss"] = "not installed"
    else:
        fla_loss = fla_modules.FusedCrossEntropyLoss()
        rows["fla FusedCrossEntropyLoss"] = timed_pair(lambda: fla_loss(logits, targets), one, (logits,))
    return rows


def layer_norm_rows(R, N):
    """{name: (fwd ms, fwd+bwd ms)} of the residual stream's norms under bf16 autocast: LayerNorm of a float32 x
    [R, N], ours and PyTorch's; then a block's residual add x + update (a bf16 mixer output) with the norm after it,
    both outputs used (the sum by the next block): ours fused, our norm after PyTorch's add, PyTorch's."""
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(R, N, device=dev, requires_grad=True)
    update = torch.randn(R, N, device=dev, dtype=torch.bfloat16, requires_grad=True)
    weight, bias = torch.randn(N, device=dev, requires_grad=True), torch.randn(N, device=dev, requires_grad=True)
    grad = torch.randn(R, N, device=dev)
    rows = {f"layer norm, {name}": timed_pair(under_autocast(lambda: layer_norm(x, weight, bias, backend=name)),
                                              grad, (x, weight, bias))
            for name in ("triton", "naive")}
    leaves = (x, update, weight, bias)

    def apart(name):
        total = x + update
        return total, layer_norm(total, weight, bias, backend=name)

    for label, fn in (("add + layer norm fused, triton", lambda: add_layer_norm(*leaves, backend="triton")),
                      ("add, then layer norm, triton", lambda: apart("triton")),
                      ("add, then layer norm, naive", lambda: apart("naive"))):
        fwd = under_autocast(fn)
        rows[label] = (timed(fwd), timed(lambda: torch.autograd.backward(fwd(), (grad, grad)), leaves))
    return rows


def softmax_attention_rows(B, N, H, D, dropout_p=0.1):
    """{name: (fwd ms, fwd+bwd ms)} of causal softmax attention over bf16 q, k, v [B, H, N, D], with attention
    dropout ``dropout_p`` (the softmax mixer's in training) and without: SDPA (the kernel PyTorch picks) and zoo's
    dense form."""
    dev = "cuda"
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, N, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(B, H, N, D, device=dev, dtype=torch.bfloat16)
    return {f"{name}, dropout {p}": timed_pair(lambda: softmax_attention(q, k, v, dropout_p=p, backend=name), grad,
                                               (q, k, v))
            for p in (dropout_p, 0.0) for name in ("sdpa", "dense")}


def attention_at_rows_rows(B, L, K, H, D, dropout_p=0.1):
    """{name: (fwd ms, fwd+bwd ms)} of attention from K labelled rows of each sequence against its L keys (the last
    block of an attention model), bf16, q [B, K, H, D] and k, v views of one [B, L, 3, H, D] projection, with
    attention dropout ``dropout_p`` (softmax's in training) and without: zoo's Triton kernels and the reference
    (SDPA's masked kernel: cuDNN on an H100)."""
    dev = "cuda"
    torch.manual_seed(0)
    q = torch.randn(B, K, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    packed = torch.randn(B, L, 3, H, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    positions = torch.rand(B, L, device=dev).argsort(1)[:, :K].sort(1).values
    grad = torch.randn(B, K, H, D, device=dev, dtype=torch.bfloat16)
    return {f"{name}, dropout {p}": timed_pair(lambda: attention_at_rows(
        q, packed[:, :, 1], packed[:, :, 2], positions, dropout_p=p, backend=name), grad, (q, packed))
        for p in (dropout_p, 0.0) for name in ("triton", "naive")}


def linear_rows(M, K, N):
    """{name: (fwd ms, fwd+bwd ms)}, timed in a CUDA graph, of a biased projection of bf16 x [M, K] (as a norm writes
    it) -> [M, N] under bf16 autocast: ours (the forward ``forward.project``'s, the bias gradient a Triton column sum)
    and ``F.linear``."""
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
    weight = (torch.randn(N, K, device=dev) * K ** -0.5).requires_grad_()
    bias = torch.randn(N, device=dev, requires_grad=True)
    grad = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
    return {name: graph_timed_pair(under_autocast(lambda: linear(x, weight, bias, backend=name)), grad,
                                   (x, weight, bias))
            for name in ("triton", "naive")}


def linear_cross_entropy_rows(R, D, V):
    """{name: (fwd ms, fwd+bwd ms)} timed in a CUDA graph of the tied head and the loss, bf16 x [R, D] and a float32
    weight [V, D] under bf16 autocast, one row in eight unlabelled: ``linear_cross_entropy`` (the logits' gradient
    written with the loss), zoo's ``linear`` then ``cross_entropy`` (the gradient written in the backward) and the
    reference."""
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(R, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    weight = (torch.randn(V, D, device=dev) * D ** -0.5).requires_grad_()
    targets = torch.randint(0, V, (R,), device=dev)
    targets[::8] = -100
    one = torch.ones((), device=dev)
    rows = {"linear_cross_entropy (triton)": lambda: linear_cross_entropy(x, weight, targets, backend="triton"),
            "linear, then cross_entropy (triton)": lambda: cross_entropy(
                linear(x, weight, None, backend="triton"), targets, backend="triton"),
            "reference (naive)": lambda: linear_cross_entropy(x, weight, targets, backend="naive")}
    return {name: graph_timed_pair(under_autocast(fn), one, (x, weight)) for name, fn in rows.items()}


def head_parts_rows(B, L, D, H):
    """{name: (fwd ms, fwd+bwd ms)}, timed in a CUDA graph, of attention's q, k, v projection of bf16 x [B, L, D]
    (as the norm before it writes it) under bf16 autocast, the backward seeded with SDPA-shaped gradients
    (contiguous [B, H, L, D/H], transposed): ``head_parts`` (its parts' gradients packed and bias-summed in one
    Triton pass), zoo's ``linear`` viewed and unbound (autograd's concatenation, then the Triton column sum) and the
    reference."""
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(B, L, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    weight = (torch.randn(3 * D, D, device=dev) * D ** -0.5).requires_grad_()
    bias = torch.randn(3 * D, device=dev, requires_grad=True)
    grads = [torch.randn(B, H, L, D // H, device=dev, dtype=torch.bfloat16).transpose(1, 2) for _ in range(3)]
    leaves = (x, weight, bias)
    rows = {"head_parts (triton)": lambda: head_parts(x, weight, bias, 3, H, backend="triton"),
            "linear (triton), view, unbind": lambda: linear(x, weight, bias, backend="triton").view(
                B, L, 3, H, D // H).unbind(2),
            "reference (naive)": lambda: head_parts(x, weight, bias, 3, H, backend="naive")}
    return {name: graph_timed_pair(under_autocast(fn), grads, leaves) for name, fn in rows.items()}


def shifted_linear_rows(B, T, D, R):
    """{name: (fwd ms, fwd+bwd ms)} of RWKV-7's projections of x under bf16 autocast, timed in a CUDA graph: r, k, v
    ([D, D] each) and four LoRA down projections of R / 4 columns each, reading six token-shift mixes of x [B, T, D]
    (bf16, as the block's norm writes it), their outputs side by side: the folded form (one matmul of [x, x_prev],
    its pieces compiled), the mixes by zoo's Triton token shift then one matmul per weight, and the reference."""
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(B, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    mixes = torch.rand(6, D, device=dev, requires_grad=True)
    weights = [(torch.randn(n, D, device=dev) * D ** -0.5).requires_grad_() for n in (D, D, D) + (R // 4,) * 4]
    mix_of = (0, 2, 3, 1, 4, 5, 3)  # the layer's MIX_OF (zoo.mixers.rwkv7, which the kernels do not import)
    grad = torch.randn(B, T, sum(w.shape[0] for w in weights), device=dev, dtype=torch.bfloat16)

    def mixed_then_matmuls():
        mixed = token_shift_mix(x, mixes, out_dtype=torch.bfloat16)
        return torch.cat([F.linear(mixed[g], w) for g, w in zip(mix_of, weights)], -1)

    rows = {"folded: one matmul of [x, x_prev]": lambda: shifted_linear(x, mixes, weights, mix_of, backend="folded"),
            "Triton token shift, a matmul per weight": mixed_then_matmuls,
            "reference (naive)": lambda: shifted_linear(x, mixes, weights, mix_of, backend="naive")}
    return {name: graph_timed_pair(under_autocast(fn), grad, (x, mixes, *weights), calls=20)
            for name, fn in rows.items()}


def graph_timed_us(fn, calls: int = 200, replays: int = 5) -> float:
    """Microseconds per call of ``fn()``: ``calls`` calls captured in one CUDA graph, the best of ``replays``
    replays. For kernels of a few microseconds, whose launch from Python would dominate ``do_bench``, timed as a
    training step's CUDA graph runs them (with the gaps between kernels)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (Triton's compile) outside the capture
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    best = float("inf")
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / calls)
    return best


def graph_timed_pair(fwd, grad, leaves, calls: int = 50):
    """(forward ms, forward + backward ms) of ``fwd()`` as :func:`graph_timed_us` times it, the backward taking
    the leaves' gradients for ``grad`` (``torch.autograd.grad``: nothing accumulates between calls)."""
    return (graph_timed_us(fwd, calls) / 1e3,
            graph_timed_us(lambda: torch.autograd.grad(fwd(), leaves, grad), calls) / 1e3)


def sum_rows_rows(G, P, N):
    """{name: us per call} of summing float32 partial sums [G, P, N] over P: ``sum_rows`` and ``torch.sum``."""
    partial = torch.randn(G, P, N, device="cuda")
    return {"sum_rows (triton)": graph_timed_us(lambda: sum_rows(partial)),
            "torch.sum(-2)": graph_timed_us(lambda: partial.sum(-2))}


def embedding_rows(B, N, D):
    """{name: us per call} of the embedding's weight gradient for B x N ids drawn uniformly from a vocabulary of
    8192 (MQAR's ids are spread so: about 8 of each id at 65536 tokens) into a float32 table [8192, D]: ours (sorted
    sums) and PyTorch's ``embedding_dense_backward``, from a float32 output gradient as the residual stream gives
    it."""
    vocab = 8192
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (B, N), device="cuda")
    grad = torch.randn(B, N, D, device="cuda")
    return {"ours (sorted sums)": graph_timed_us(lambda: embedding_backward(grad, ids, vocab, torch.float32),
                                                 calls=50),
            "PyTorch embedding_dense_backward": graph_timed_us(
                lambda: torch.ops.aten.embedding_dense_backward(grad, ids, vocab, -1, False), calls=50)}


# a section option's default before parsing: told apart from a value given on the command line
NOT_GIVEN = object()


def shape_of(names: str):
    """An argparse type: "1,2,3" -> (1, 2, 3), one positive int per comma-separated name in ``names``; "" -> None
    (the section is skipped). Anything else is an argparse error (exit 2) that names the expected form."""
    def parse(text: str) -> tuple[int, ...] | None:
        if text == "":
            return None
        parts = text.split(",")
        if len(parts) != len(names.split(",")) or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"{text!r} is not valid: expected {names} as positive integers, or ''")
        return tuple(int(p) for p in parts)

    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's options. Each section runs at its default shapes, except: one given empty ('' or no value) is
    skipped, and once any section is given shapes, the sections not given are skipped too (``--rwkv7 256,256,2,64``
    runs that section alone)."""
    parser = argparse.ArgumentParser(prog="python -m zoo.kernels.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = {}

    def section(flag, default, **kwargs):
        defaults[parser.add_argument(flag, default=NOT_GIVEN, **kwargs).dest] = default

    section("--shapes", nargs="*", type=shape_of("B,H,T,D,window"),
            default=[(1, 16, 65536, 64, 512), (256, 2, 512, 64, 256)],
            help="attention shapes B,H,T,D,window")
    section("--attention-blocks", nargs="*", type=shape_of("B,H,T,D,window"),
            default=[(256, 2, 512, 64, 256)],
            help="attention shapes B,H,T,D,window: each kernel of ours per launch (block sizes, warps, "
                 "stages), the table's first")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")  # not a section
    section("--scan", type=shape_of("T,H"), default=(65536, 64),
            help="preprocessing shape T,H (empty to skip)")
    section("--recurrences", type=shape_of("B,T,H,K"), default=(128, 128, 2, 64),
            help="recurrence shape B,T,H,K (empty to skip)")
    section("--rwkv7", nargs="*", type=shape_of("B,T,H,K"), default=[(256, 256, 2, 64)],
            help="RWKV-7 Triton recurrence shapes B,T,H,K (K = V = head size), every launch choice")
    section("--rwkv7-kernels", nargs="*", type=shape_of("B,T,H,K"), default=[(256, 256, 2, 64)],
            help="RWKV-7's chunked Triton kernels each alone, B,T,H,K (K = V = head size), several launches each")
    section("--selective-scan", nargs="*", type=shape_of("B,L,E,N"), default=[(256, 256, 256, 16)],
            help="Mamba selective scan shapes B,L,E,N (E = expand x d_model), every launch choice")
    section("--ssd", nargs="*", type=shape_of("B,L,H,P,N"), default=[(256, 256, 4, 64, 128)],
            help="Mamba-2 SSD shapes B,L,H,P,N (heads, head dim, state size)")
    section("--wkv4", nargs="*", type=shape_of("B,L,C"), default=[(256, 256, 128), (128, 512, 512)],
            help="RWKV-4 WKV shapes B,L,C (C = d_model), every launch choice")
    section("--short-conv", nargs="*", type=shape_of("B,T,C,K"), default=[(256, 256, 384, 3)],
            help="depthwise causal conv shapes B,T,C,K")
    section("--gated-long-conv", nargs="*", type=shape_of("B,L,D"),
            default=[(256, 256, 128), (128, 512, 64)],
            help="Hyena's gated long conv shapes B,L,D (D = d_model)")
    section("--cross-entropy", nargs="*", type=shape_of("R,V"), default=[(4096, 8192)],
            help="training loss shapes R,V (labelled rows, vocabulary)")
    section("--layer-norm", nargs="*", type=shape_of("R,N"), default=[(65536, 128)],
            help="residual stream shapes R,N (rows, d_model) of the norms and the fused residual add")
    section("--softmax-attention", nargs="*", type=shape_of("B,N,H,D"),
            default=[(128, 512, 1, 512), (256, 256, 1, 256)],
            help="causal softmax attention shapes B,N,H,D: SDPA against the dense form")
    section("--attention-rows", nargs="*", type=shape_of("B,L,K,H,D"),
            default=[(256, 256, 16, 1, 128), (256, 256, 16, 2, 64)],
            help="attention from K labelled rows, B,L,K,H,D: zoo's Triton kernels against SDPA with a mask")
    section("--linear", nargs="*", type=shape_of("M,K,N"), default=[(65536, 128, 384), (65536, 128, 128)],
            help="biased projection shapes M,K,N (rows, in, out)")
    section("--linear-cross-entropy", nargs="*", type=shape_of("R,D,V"), default=[(4096, 128, 8192)],
            help="the tied head and the loss, R labelled rows, D, V classes: one op against the two apart")
    section("--head-parts", nargs="*", type=shape_of("B,L,D,H"), default=[(256, 256, 128, 1), (128, 512, 512, 8)],
            help="attention's q, k, v projection B,L,D,H (d_model, heads): parts' gradients packed in one pass")
    section("--shifted-linear", nargs="*", type=shape_of("B,T,D,R"),
            default=[(256, 256, 128, 160), (128, 512, 512, 288)],
            help="RWKV-7's projections of token-shifted x, B,T,D,R (d_model, the LoRA ranks' sum): folded or not")
    section("--embedding", nargs="*", type=shape_of("B,N,D"), default=[(256, 256, 128), (128, 512, 512)],
            help="the embedding's weight gradient at B x N uniform ids, B,N,D (batch, length, d_model)")
    section("--sum-rows", nargs="*", type=shape_of("G,P,N"),
            default=[(1, 176, 384), (2, 528, 128), (1, 1024, 1536)],
            help="partial sums [G, P, N] summed over P (groups, programs' rows, columns)")
    args = parser.parse_args(argv)
    given = {dest for dest in defaults if getattr(args, dest) is not NOT_GIVEN}
    shaped = any(_has_shapes(getattr(args, dest)) for dest in given)
    for dest, default in defaults.items():
        if dest not in given:
            setattr(args, dest, [] if shaped else default)
    return args


def _has_shapes(value) -> bool:
    """Whether a section's parsed value names at least one shape (a list of them, or one)."""
    return any(filter(None, value)) if isinstance(value, list) else value is not None


def main(argv: list[str] | None = None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("zoo.kernels.bench needs a CUDA GPU")
    print(f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}  dtype {args.dtype}")
    for B, H, T, D, window in filter(None, args.shapes):
        flops = 4 * B * H * D * band_pairs(T, window)
        print(f"\nB={B} H={H} T={T} D={D} window={window}")
        print(f"{'':30s} {'fwd ms':>9s} {'fwd+bwd ms':>11s} {'fwd TFLOP/s':>12s} {'f+b TFLOP/s':>12s}  (FLOPs of the window band)")
        rows = attention_rows(B, H, T, D, window, DTYPES[args.dtype])
        for name, row in rows.items():
            if isinstance(row, str):
                print(f"{name:30s} {row}")
                continue
            fwd, both = row
            print(f"{name:30s} {fwd:9.3f} {both:11.3f} {flops / fwd / 1e9:12.1f} {3.5 * flops / both / 1e9:12.1f}")
        gated, plain = rows["ours"], rows["ours, gate off"]
        print(f"gate overhead: fwd {100 * (gated[0] / plain[0] - 1):+.1f}%, fwd+bwd {100 * (gated[1] / plain[1] - 1):+.1f}%")
    for B, H, T, D, window in filter(None, args.attention_blocks):
        print(f"\nwindow attention launches, B={B} H={H} T={T} D={D} window={window}, with the gate, us per call in a "
              f"CUDA graph (dkdv, dq: the whole backward, that kernel's launch varied)")
        for kernel, row in attention_blocks_rows(B, H, T, D, window, DTYPES[args.dtype]).items():
            for name, us in row.items():
                print(f"{kernel:5s} {name:36s} " + (us if isinstance(us, str) else f"{us:9.1f}"))
    if args.scan:
        T, H = args.scan
        print(f"\npreprocessing forward, (1, {T}, {H}) fp32")
        for name, (ms, gbs) in scan_rows(T, H).items():
            print(f"{name:52s} {ms * 1e3:9.1f} us {gbs:8.0f} GB/s")
    if args.recurrences:
        B, T, H, K = args.recurrences
        print(f"\nlinear recurrences, B={B} T={T} H={H} K=V={K} fp32, forward+backward ms")
        for op, row in recurrence_rows(B, T, H, K).items():
            for backend, ms in row.items():
                print(f"{op:20s} {backend:14s} " + (f"{ms:9.3f}" if isinstance(ms, float) else ms))
    for B, T, H, K in filter(None, args.rwkv7):
        print(f"\nRWKV-7 recurrence, B={B} T={T} H={H} K=V={K}, bf16 inputs")
        print_pairs(rwkv7_rows(B, T, H, K))
    for B, T, H, K in filter(None, args.rwkv7_kernels):
        print(f"\nRWKV-7 chunked kernels each alone, B={B} T={T} H={H} K=V={K}, bf16 inputs, ms")
        for (kernel, name), ms in rwkv7_kernel_rows(B, T, H, K).items():
            print(f"{kernel:20s} {name:60s} {ms:9.3f}")
    for Bt, L, E, N in filter(None, args.selective_scan):
        print(f"\nselective scan, B={Bt} L={L} E={E} N={N}, bf16 inputs, D, z, dt bias, softplus")
        print_pairs(selective_scan_rows(Bt, L, E, N))
    for Bt, L, H, P, N in filter(None, args.ssd):
        print(f"\nMamba-2 SSD, B={Bt} L={L} H={H} P={P} N={N}, bf16 autocast, D")
        print_pairs(ssd_rows(Bt, L, H, P, N))
    for B, L, C in filter(None, args.wkv4):
        print(f"\nRWKV-4 WKV, B={B} L={L} C={C}, bf16 k, v, r, float32 w, u")
        print_pairs(wkv4_rows(B, L, C))
    for B, T, C, K in filter(None, args.short_conv):
        print(f"\ndepthwise causal conv, B={B} T={T} C={C} K={K}, bf16 input, timed in a CUDA graph")
        print_pairs(short_conv_rows(B, T, C, K))
    for B, L, D in filter(None, args.gated_long_conv):
        print(f"\ngated long conv (Hyena), B={B} L={L} D={D}, bf16 autocast")
        print_pairs(gated_long_conv_rows(B, L, D))
    for R, V in filter(None, args.cross_entropy):
        print(f"\ncross-entropy, R={R} labelled rows x V={V} classes, bf16 logits, mean over the labelled rows")
        print_pairs(cross_entropy_rows(R, V))
    for R, N in filter(None, args.layer_norm):
        print(f"\nlayer norm of a float32 stream [{R}, {N}], bf16 autocast; residual add of a bf16 update")
        print_pairs(layer_norm_rows(R, N))
    for B, N, H, D in filter(None, args.softmax_attention):
        print(f"\ncausal softmax attention, B={B} N={N} H={H} D={D}, bf16")
        print_pairs(softmax_attention_rows(B, N, H, D))
    for B, L, K, H, D in filter(None, args.attention_rows):
        print(f"\nattention from {K} labelled rows of each sequence, B={B} L={L} H={H} D={D}, bf16")
        print_pairs(attention_at_rows_rows(B, L, K, H, D))
    for M, K, N in filter(None, args.linear):
        print(f"\nbiased projection [{M}, {K}] -> [{M}, {N}], bf16 x, bf16 autocast, in a CUDA graph")
        print_pairs(linear_rows(M, K, N))
    for R, D, V in filter(None, args.linear_cross_entropy):
        print(f"\ntied head and loss, x [{R}, {D}] @ weight [{V}, {D}]^T, bf16 autocast, mean over the labelled rows")
        print_pairs(linear_cross_entropy_rows(R, D, V))
    for B, L, D, H in filter(None, args.head_parts):
        print(f"\nq, k, v projection [{B}, {L}, {D}] -> 3 x [{B}, {L}, {H}, {D // H}], bf16 autocast, SDPA-shaped "
              f"gradients")
        print_pairs(head_parts_rows(B, L, D, H))
    for B, T, D, R in filter(None, args.shifted_linear):
        print(f"\nRWKV-7's projections of six token-shift mixes, B={B} T={T} D={D}, LoRA ranks {R} in all, bf16 "
              f"autocast, timed in a CUDA graph")
        print_pairs(shifted_linear_rows(B, T, D, R))
    for B, N, D in filter(None, args.embedding):
        print(f"\nembedding weight gradient, B={B} x N={N} uniform ids into [8192, {D}] float32, "
              f"us per call in a CUDA graph")
        for name, us in embedding_rows(B, N, D).items():
            print(f"{name:44s} {us:9.2f}")
    for G, P, N in filter(None, args.sum_rows):
        print(f"\nfloat32 partial sums [{G}, {P}, {N}] summed over {P} rows, us per call in a CUDA graph")
        for name, us in sum_rows_rows(G, P, N).items():
            print(f"{name:44s} {us:9.2f}")


if __name__ == "__main__":
    main()
