"""Softmax attention and sliding-window attention (SWA) mixers.

Both project x (B, L, D) to q, k, v of shape (B, L, H, D/H), attend causally and project back.
With Zoology's arguments they compute Zoology's layers (``tests/parity/test_parity_{softmax,swa}.py``):
``softmax`` with ``bias=True`` is ``zoology.mixers.attention.MHA``, ``swa`` with ``num_heads=1,
bias=True, window=b + 1`` is ``zoology.mixers.slide_attn.SlidingAttn(block_size=b)``.
"""
from __future__ import annotations

import torch
from torch import nn

from zoo.kernels.attention import attention_at_rows, softmax_attention
from zoo.kernels.gatedfwa import gated_window_attention
from zoo.kernels.linear import Linear, head_parts
from zoo.kernels.rows import rows_at
from zoo.errors import ConfigError
from zoo.mixers.registry import POSITIONS, register_mixer
from zoo.rope import apply_rope


class MultiHeadMixer(nn.Module):
    """Shared q/k/v and output projections; subclasses implement ``attend(q, k, v, x)``.

    Args:
        d_model: model width D.
        num_heads: H; D must be divisible by H.
        bias: biases in the q/k/v and output projections (Zoology's attention layers have them).
        positions: the model's ``model.positions`` (set by the model, not a mixer kwarg); with
            ``"rope"`` q and k are rotated (``zoo.rope``) before ``attend``.
    """

    default_positions = "learned"  # Zoology's attention baseline uses learned absolute positions
    input_feeds_one_matmul = True  # x reaches the qkv projection alone (a subclass whose attend reads x says False)
    outputs_at_positions = True  # forward(x, positions) attends from those queries alone (``attend_at``)
    attention_dropout = 0.0  # dropout on the attention probabilities in training (``attend_at`` applies it)
    window: int | None = None  # keys a query sees, itself included (None: every earlier key)

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 2,
                 bias: bool = True, positions: str = "learned"):
        super().__init__()
        if num_heads < 1 or d_model % num_heads:
            raise ConfigError("model.mixer_kwargs.num_heads", num_heads, f"a divisor of d_model={d_model}")
        if positions not in POSITIONS:
            raise ConfigError("model.positions", positions, list(POSITIONS))
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.rope = positions == "rope"
        self.qkv = Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)

    def project(self, x: torch.Tensor, rows: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, L, D) -> q, k, v (B, L, H, D/H), views of one projection through ``self.qkv``'s weight and bias (q at
        ``rows`` (B, K) alone where given, (B, K, H, D/H): its gradient is packed from those rows where they belong)
        (``zoo.kernels.linear.head_parts``). Backward, its Triton pass writes the three gradients (with whatever
        strides attention gave them) side by side into the [B * L, 3D] gradient the matmuls read and sums them for the
        bias as it goes: no concatenation by autograd, no second read for the bias. (As three projections of x through
        ``linear_parts``, which leaves out the concatenation too, softmax's training step at the figure-2 cell took
        1.76 ms against 1.49 on an H100: three narrower matmuls and their float32 input-gradient sums cost more than
        the copy.)"""
        return head_parts(x, self.qkv.weight, self.qkv.bias, 3, self.num_heads, rows)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D), or with ``positions`` (B, K) the outputs at those rows alone, (B, K, D): the
        queries there attend to every key they see, and the other queries are never formed into outputs."""
        if self.rope:  # a query is rotated by its position, so the rows are picked after the rotation
            q, k, v = self.project(x)
            q, k = apply_rope(q), apply_rope(k)
            q = q if positions is None else rows_at(q, positions)
        else:
            q, k, v = self.project(x, positions)
        o = self.attend(q, k, v, x) if positions is None else self.attend_at(q, k, v, positions)
        return self.out_proj(o.flatten(2))

    def attend(self, q, k, v, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def attend_at(self, q, k, v, positions, key_bias=None):
        """The queries at ``positions`` (B, K) alone: o (B, K, H, D/H) from their q (B, K, H, D/H) and k, v (B, L, H,
        D/H), through ``zoo.kernels.attention.attention_at_rows``: each query sees the keys up to its position (within
        ``window`` where set), ``key_bias`` (B, L, H) is added to key j's logits (GatedFWA's decay), and the
        attention dropout applies in training. At MQAR's K = L / 16 that is a sixteenth of the causal attention's
        work; on a GPU it runs as one Triton program per sequence and head, where SDPA's masked kernel took as long as
        the full causal attention (``zoo/kernels/attention/at_rows.py``)."""
        return attention_at_rows(q, k, v, positions, self.window, key_bias,
                                 self.attention_dropout if self.training else 0.0)


@register_mixer("softmax")
class SoftmaxAttention(MultiHeadMixer):
    """Causal multi-head softmax attention through ``zoo.kernels.attention.softmax_attention``: SDPA, or past head
    dim 256 on a GPU the score matrix in memory (the same function, faster there than SDPA's memory-efficient kernel).

    Args:
        dropout: dropout on the attention probabilities while training (the model's ``model.dropout``,
            set by the model; Zoology's figure-2 attention uses 0.1).
    """

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 2,
                 bias: bool = True, positions: str = "learned", dropout: float = 0.0):
        super().__init__(d_model, layer_idx, max_seq_len, num_heads, bias, positions)
        if not 0 <= dropout < 1:
            raise ConfigError("model.dropout", dropout, "a probability in [0, 1)")
        self.attention_dropout = dropout

    def attend(self, q, k, v, x):
        o = softmax_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                              dropout_p=self.attention_dropout if self.training else 0.0)
        return o.transpose(1, 2)

    def state_size(self, seq_len: int) -> int:
        """Values cached after ``seq_len`` tokens: keys and values, 2 * L * D."""
        return 2 * seq_len * self.num_heads * self.head_dim


@register_mixer("swa")
class SlidingWindowAttention(MultiHeadMixer):
    """Sliding-window attention: query i sees keys i - window < j <= i.

    No attention dropout: the window kernels have none (Zoology's sliding-window runs have none either).

    Args:
        window: width w (keys per query, itself included); None means ``max_seq_len // 2`` (the
            GatedFWA paper's MQAR setup). Zoology's ``block_size`` b is ``window = b + 1``.
    """

    def __init__(self, d_model: int, layer_idx: int = 0, max_seq_len: int = 2048, num_heads: int = 2,
                 bias: bool = True, positions: str = "learned", window: int | None = None):
        super().__init__(d_model, layer_idx, max_seq_len, num_heads, bias, positions)
        self.window = max_seq_len // 2 if window is None else window
        if self.window < 1:
            raise ConfigError("model.mixer_kwargs.window", window, "an integer >= 1")

    def attend(self, q, k, v, x):
        return gated_window_attention(q, k, v, None, self.window)

    def state_size(self, seq_len: int) -> int:
        """Values cached after ``seq_len`` tokens: keys and values of the last ``window`` tokens."""
        return 2 * min(seq_len, self.window) * self.num_heads * self.head_dim
