"""LayerNorm and RMSNorm over the last dim (RMSNorm optionally times a swish gate), with Triton kernels for the
tall, narrow inputs of small models.

Why: on the rows of MQAR's residual stream (65536 x 128, float32) PyTorch's LayerNorm forward ran at a quarter
of memory speed on an H100 (~100 us), its input gradient took ~60 us and the weight and bias gradients as
many again; and ``nn.RMSNorm`` with a bf16 input (autocast) and float32 weights leaves PyTorch's fused path
for a dozen small elementwise kernels per call (GatedFWA's QK and output norms, on strided q, k). The fast
path (``fused.py``) is one Triton kernel forward and one backward (plus a column sum of per-program weight
and bias partials), reads strided views in place and fuses the gate: ``y = norm(x) * weight * silu(gate)``.

``layer_norm(x, weight, bias, eps, backend)``, ``add_layer_norm(x, update, weight, bias, eps, backend)`` (the norm of
x + update, returned with the sum: a pre-norm block's residual add fused into the norm after it),
``embedding_layer_norm(ids, table, update, weight, bias, eps, backend)`` (the same with x = table[ids]: a model's
embedding gathered by the first norm) and ``rms_norm(x, weight, eps, gate, out_dtype, backend)``;
``backend``: ``"triton"``, ``"naive"`` (``naive.py``: ``F.layer_norm``, ``F.rms_norm``) or ``"auto"`` (Triton
for float32/bf16/fp16 CUDA tensors with N <= ``MAX_N``, else the reference). Both compute in float32 (float64
stays float64 in the reference). ``zoo.kernels.backend.last_backend("layer_norm")`` / ``("rms_norm")`` say
which ran.

Output dtypes are PyTorch's (2.13): ``layer_norm`` gives float32 under autocast (F.layer_norm autocasts to
float32) and x's dtype otherwise. ``rms_norm`` does not autocast (neither does ``F.rms_norm``) and gives x's
dtype, whatever the weight's (``F.rms_norm`` of a bf16 x with a float32 weight computes in float32 and
rounds once to bf16, as here), or with a gate the promoted dtype of x and gate, as ``nn.RMSNorm(x) *
F.silu(gate)``; ``out_dtype`` overrides it.
"""
from __future__ import annotations

import torch

from zoo.kernels.autocast import matmul_dtype
from zoo.kernels.backend import NAIVE, check_backend, named_or_gpu, record
from zoo.kernels.embedding import embedding, embedding_dropout, masks_by_flat_index
from zoo.kernels.layer_norm.naive import layer_norm_naive, rms_norm_naive
from zoo.kernels.rows import rows_at

BACKENDS = ("auto", "triton", NAIVE)
MAX_N = 4096  # wider rows no longer fit a tile in registers, and PyTorch's kernels handle them well
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _use_triton(op: str, backend: str, x: torch.Tensor) -> bool:
    check_backend(backend, BACKENDS)
    fits = x.shape[-1] <= MAX_N and x.dtype in TRITON_DTYPES
    if backend == "triton" and not fits:
        raise ValueError(f"x of shape {tuple(x.shape)} and dtype {x.dtype} is not valid for backend='triton': "
                         f"expected at most {MAX_N} channels and one of {', '.join(map(str, TRITON_DTYPES))}")
    triton = fits and named_or_gpu(backend, "triton", x)
    record(op, "triton" if triton else NAIVE)
    return triton


def _autocast_out(x: torch.Tensor, default: torch.dtype, to_matmul: bool) -> torch.dtype:
    """y's dtype: ``default`` (x's) without autocast; under it float32, as ``F.layer_norm`` gives, or with
    ``to_matmul`` autocast's own dtype."""
    autocast = matmul_dtype(x)
    if autocast is None:
        return default
    return autocast if to_matmul else torch.float32


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float = 1e-5,
               backend: str = "auto", to_matmul: bool = False) -> torch.Tensor:
    """LayerNorm over the last dim of x [..., N] (last dim contiguous for a copy-free read) with weight, bias [N]
    (each may be None) -> y [..., N], float32 under autocast, else x's dtype.

    ``to_matmul``: y feeds one matmul and nothing else, which under autocast casts it to autocast's dtype; y is
    then written in that dtype, rounded as the cast rounds, and its gradient comes back in it. The numbers are the
    same, without a float32 y, the cast and the cast of the gradient back: about 130 MB of traffic fewer a norm
    and step at MQAR's figure-2 cell. (With two or more consumers autograd would sum their gradients in bf16,
    not float32: not the same numbers.)"""
    out_dtype = _autocast_out(x, x.dtype, to_matmul)
    if not _use_triton("layer_norm", backend, x):
        return layer_norm_naive(x, weight, bias, eps).to(out_dtype)
    from zoo.kernels.layer_norm.fused import norm_triton
    return norm_triton(x, weight, bias, None, eps, False, out_dtype)


def add_layer_norm(x: torch.Tensor, update: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   eps: float = 1e-5, backend: str = "auto", to_matmul: bool = False,
                   rows: torch.Tensor | None = None, pre: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, layer_norm(s)) with s = x + update (x [..., N], s in their promoted dtype): a pre-norm block's residual
    add and the norm that reads its result. update has x's shape or its trailing dims alone (learned positions [L,
    N] added to every sequence of x [B, L, N]), broadcast over the rest. The Triton path does both in one pass, and
    in the backward adds s's own gradient to the norm's and writes the sum for x and for update in their dtypes (for
    a broadcast update, summed over the dims it was broadcast over, by a column sum of x's gradient): the numbers of
    the add, the norm and autograd's sum and cast, in one kernel each way (on a GPU up to the rounding of a
    multiply-add the compiler may fuse into that sum, and the order of the broadcast update's sum). y's dtype is
    ``layer_norm``'s (``to_matmul`` too).

    ``rows`` [B, K] (int64, x [B, L, N]): s is wanted at those rows of each sequence alone, returned as [B, K, N]
    (``rows_at(s, rows)``; the last block's stream, whose other rows reach no loss). Its gradient then comes back
    as those rows, and the Triton backward adds each where it belongs as it writes x's gradient: no zero-filled
    [B, L, N] gradient with the rows scattered into it, no second read of it. The rows of a sequence must be
    distinct there (a repeated row's gradients would not add up; ``zoo.data`` pads positions with distinct rows).

    ``pre`` (pre_weight, pre_bias, pre_eps), another LayerNorm's parameters: s = s1 + layer_norm(s1) with s1 = x +
    update, in place of s1 (Zoology's block with its Identity state mixer adds its norm2's output to the stream; the
    next norm reads the result). That is ``add_layer_norm(*add_layer_norm(x, update, *pre), weight, bias, eps)``,
    which the Triton path computes in one pass each way where the pre norm's output has s1's dtype (a float32 stream
    under autocast): at MQAR's figure-2 cell a norm's pass over the stream each way, the pre norm's output and its
    gradient never written."""
    if update.dim() > x.dim() or update.shape != x.shape[x.dim() - update.dim():]:
        raise ValueError(f"update.shape={tuple(update.shape)} is not valid: expected the shape of x, "
                         f"{tuple(x.shape)}, or its trailing dims")
    out_dtype = _autocast_out(x, torch.promote_types(x.dtype, update.dtype), to_matmul)
    if rows is not None and (x.dim() != 3 or rows.dim() != 2 or rows.shape[0] != x.shape[0]):
        raise ValueError(f"rows.shape={tuple(rows.shape)} is not valid: expected [B, K] rows of x [B, L, N], "
                         f"{tuple(x.shape)}")
    triton = _use_triton("layer_norm", backend, x)
    if pre is not None:
        s1_dtype = torch.promote_types(x.dtype, update.dtype)
        if not triton or _autocast_out(x, s1_dtype, False) != s1_dtype:  # the two norms apart
            s1, h = add_layer_norm(x, update, *pre, backend=backend)
            return add_layer_norm(s1, h, weight, bias, eps, backend, to_matmul, rows)
    if not triton:
        total = x + update
        y = layer_norm_naive(total, weight, bias, eps).to(out_dtype)
        return (total if rows is None else rows_at(total, rows)), y
    from zoo.kernels.layer_norm.fused import add_norm_triton
    return add_norm_triton(x, update, weight, bias, eps, False, out_dtype, rows, pre)


def embedding_layer_norm(ids: torch.Tensor, table: torch.Tensor, update: torch.Tensor | None,
                         weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float = 1e-5,
                         backend: str = "auto", to_matmul: bool = False, rows: torch.Tensor | None = None,
                         dropout: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, layer_norm(s)) with s = table[ids] + update (update None: table[ids]): :func:`add_layer_norm` of the
    embedding ``zoo.kernels.embedding.embedding(ids, table)``, ids [...] (int64, each in [0, V)), table [V, N]. The
    Triton path gathers the rows inside the norm's one pass (no [..., N] copy of them written and read back: 64 MB
    of float32 traffic a step at MQAR's figure-2 cell, where softmax's epoch went from 0.491 to 0.471 s on an H100
    80GB) and sums the input gradient into the table's rows with the embedding's deterministic backward. ``rows`` as
    :func:`add_layer_norm`'s (ids then [B, L]).

    ``dropout`` p > 0 (a model's embedding dropout, in training): s = dropout(table[ids] + update), ids [B, L] and
    update [L, N] (learned positions) or None, as ``zoo.kernels.embedding.embedding_dropout`` computes it (the same
    mask for the same seed), inside the norm's pass on the Triton path: no [B, L, N] dropout output written and read
    back, no separate pass for its gradient."""
    if table.dim() != 2 or (update is not None and (update.dim() > ids.dim() + 1 or update.shape
                                                    != (*ids.shape, table.shape[1])[ids.dim() + 1 - update.dim():])):
        raise ValueError(f"embedding_layer_norm: table {tuple(table.shape)} and update "
                         f"{None if update is None else tuple(update.shape)} are not valid for ids {tuple(ids.shape)}: "
                         f"expected a table [V, N] and an update of [*ids.shape, N]'s trailing dims or None")
    if rows is not None and (ids.dim() != 2 or rows.dim() != 2 or rows.shape[0] != ids.shape[0]):
        raise ValueError(f"rows.shape={tuple(rows.shape)} is not valid: expected [B, K] rows of ids [B, L], "
                         f"{tuple(ids.shape)}")
    if not 0 <= dropout < 1:
        raise ValueError(f"embedding_layer_norm: dropout={dropout} is not valid: expected a probability in [0, 1)")
    if dropout and (ids.dim() != 2 or (update is not None and update.dim() != 2)):
        raise ValueError(f"embedding_layer_norm: ids {tuple(ids.shape)} and update "
                         f"{None if update is None else tuple(update.shape)} are not valid with dropout: expected "
                         f"ids [B, L] and learned positions [L, N] or None")
    if dropout and not masks_by_flat_index(ids, table):
        if backend == "triton":
            raise ValueError(f"ids {tuple(ids.shape)} and table {tuple(table.shape)} are not valid for "
                             f"backend='triton' with dropout: expected ids.numel() * N < 2 ** 31")
        backend = NAIVE
    if not _use_triton("layer_norm", backend, table):
        sub_backend = NAIVE if backend == NAIVE else "auto"
        if dropout or update is None:  # the embedding (dropout op: one Triton pass on a GPU), then the norm
            x = (embedding_dropout(ids, table, update, dropout, backend=sub_backend) if dropout
                 else embedding(ids, table, backend=sub_backend))
            y = layer_norm(x, weight, bias, eps, NAIVE, to_matmul)
            return (x if rows is None else rows_at(x, rows)), y
        return add_layer_norm(embedding(ids, table, backend=sub_backend), update, weight, bias, eps, NAIVE, to_matmul,
                              rows)
    dtype = table.dtype if update is None else torch.promote_types(table.dtype, update.dtype)
    from zoo.kernels.layer_norm.fused import embed_norm_triton
    record("embedding", "triton")  # the rows gathered here, their gradient summed by the embedding's Triton backward
    if dropout:
        record("embedding_dropout", "triton")
    return embed_norm_triton(ids, table, update, weight, bias, eps, _autocast_out(table, dtype, to_matmul), rows,
                             dropout)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float | None = None,
             gate: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
             backend: str = "auto", gate_first: bool = False) -> torch.Tensor:
    """RMSNorm over the last dim of x [..., N] times weight [N] (None: 1), times silu(gate) for a gate [..., N]
    (None: no gate) -> y [..., N] in ``out_dtype``, by default x's dtype promoted with the gate's.
    ``gate_first``: the norm of x * silu(gate) instead (Mamba-2's gated norm), the product in float32.

    ``eps`` None is ``F.rms_norm``'s default, the machine epsilon of the float32 (float64) math.
    """
    if gate is not None and gate.shape != x.shape:
        raise ValueError(f"gate.shape={tuple(gate.shape)} is not valid: expected the shape of x, {tuple(x.shape)}")
    acc = torch.promote_types(x.dtype, torch.float32)
    eps = torch.finfo(acc).eps if eps is None else eps
    if out_dtype is None:
        out_dtype = x.dtype if gate is None else torch.promote_types(x.dtype, gate.dtype)
    if not _use_triton("rms_norm", backend, x):
        return rms_norm_naive(x, weight, eps, gate, out_dtype, gate_first)
    from zoo.kernels.layer_norm.fused import norm_triton
    return norm_triton(x, weight, None, gate, eps, True, out_dtype, gate_first)


class LayerNorm(torch.nn.LayerNorm):
    """``nn.LayerNorm`` over the last dim (same parameters and state dict) that uses :func:`layer_norm`.

    ``to_matmul`` (keyword, default False): its output feeds one matmul alone, so under autocast it is written in
    autocast's dtype (see :func:`layer_norm`)."""

    def __init__(self, *args, to_matmul: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.to_matmul = to_matmul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps, to_matmul=self.to_matmul)

    def after_add(self, x: torch.Tensor, update: torch.Tensor, rows: torch.Tensor | None = None,
                  pre: "LayerNorm | None" = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(s = x + update, or its ``rows`` alone, and this norm of it) through :func:`add_layer_norm`: one pass each
        way on a GPU. With ``pre``, another LayerNorm, s = s1 + pre(s1) with s1 = x + update."""
        return add_layer_norm(x, update, self.weight, self.bias, self.eps, to_matmul=self.to_matmul, rows=rows,
                              pre=None if pre is None else (pre.weight, pre.bias, pre.eps))

    def after_embedding(self, ids: torch.Tensor, table: torch.Tensor, update: torch.Tensor | None,
                        rows: torch.Tensor | None = None,
                        dropout: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """(dropout(table[ids] + update), or its ``rows`` alone, and this norm of it) through
        :func:`embedding_layer_norm`: the rows gathered (and dropped) in the norm's one pass on a GPU."""
        return embedding_layer_norm(ids, table, update, self.weight, self.bias, self.eps, to_matmul=self.to_matmul,
                                    rows=rows, dropout=dropout)


class RMSNorm(torch.nn.RMSNorm):
    """``nn.RMSNorm`` over the last dim (same parameters and state dict) that uses :func:`rms_norm`, optionally
    times silu(gate): ``forward(x, gate=None, out_dtype=None)``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if len(self.normalized_shape) != 1:
            raise ValueError(f"normalized_shape={self.normalized_shape} is not valid: expected one dim (the last)")

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, gate, out_dtype)


__all__ = ["layer_norm", "add_layer_norm", "embedding_layer_norm", "rms_norm", "LayerNorm", "RMSNorm", "BACKENDS"]
