"""MAD's autoencoder backbone, the model of its compression task (``model.backbone: autoencoder``).

MAD (Poli et al., 2024; mad-lab ``mad/model/auto_encoder.py``, class ``AutoEncoder`` with its default
``global_pool="last"``) trains compression with an encoder of the mixer layers under test, pools the whole
sequence into the encoder's state at the last position (the compression token), and decodes every
token from that one vector with a small MLP that never sees the sequence. For token ids ``x`` [B, T]::

    h   = Encoder(x)                                   [B, T, D]  zoo's LanguageModel (same mixers and blocks)
    z   = h[:, T-1]                                    [B, D]     the pooled vector
    u_t = z + p_t                                      [B, T, D]  p_t: fixed sinusoidal embedding of position t
    y_t = LN(GELU(W_2 LN(GELU(W_1 LN(u_t)))))          [B, T, D]  position-wise MLP, D -> D -> D
    logits_t = W_o y_t + b_o                           [B, T, V]  its own head (not tied to the embedding)

so every output depends on the input only through ``z``. The loss and accuracy are MAD's: cross-entropy
and argmax accuracy at every position, the label being the input token there (``tasks/compression.py``).

Two differences from MAD, both so that the encoder is exactly the model of every other zoo run: the norms
are zoo's LayerNorm (MAD: RMSNorm), and ``z`` is read after the encoder's final norm (MAD pools the
residual stream; its decoder's first norm follows in both). Decoder and head are initialised as MAD's
(weights N(0, 0.02), biases zero) under either ``model.init``; the encoder follows ``model.init``.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from zoo.kernels.cross_entropy import cross_entropy
from zoo.kernels.layer_norm import LayerNorm
from zoo.kernels.rows import rows_at
from zoo.model import LanguageModel


def sinusoids(num_positions: int, dim: int) -> torch.Tensor:
    """The fixed position table of MAD's decoder (fairseq's), [num_positions, dim].

    Row t is ``[sin(t w_0), ..., sin(t w_{h-1}), cos(t w_0), ..., cos(t w_{h-1})]`` with ``h = dim // 2``
    and ``w_i = 10000^(-i / (h - 1))``, plus a zero column when ``dim`` is odd."""
    half = dim // 2
    rates = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / max(half - 1, 1)))
    angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * rates[None]
    table = torch.cat([angles.sin(), angles.cos()], dim=1)
    return nn.functional.pad(table, (0, dim % 2))


class AutoEncoder(nn.Module):
    """Encoder, last-position pooling, position-wise MLP decoder and head; see the module docstring.

    Args:
        encoder: the mixer stack, a ``LanguageModel`` (its tied output head is not used); its vocabulary,
            width and ``max_seq_len`` size the decoder.

    ``forward`` returns the decoder's hidden states [B, T, D] and ``logits`` maps them to [..., V], the
    interface of ``LanguageModel``, so training computes logits only at labelled positions as for any model.
    """

    def __init__(self, encoder: LanguageModel):
        super().__init__()
        vocab_size, d_model = encoder.embed.weight.shape
        self.encoder = encoder
        self.register_buffer("positions", sinusoids(encoder.max_seq_len, d_model), persistent=False)
        self.decoder = nn.Sequential(
            LayerNorm(d_model), nn.Linear(d_model, d_model), nn.GELU(),
            LayerNorm(d_model), nn.Linear(d_model, d_model), nn.GELU(),
            LayerNorm(d_model),  # the first half of MAD's head (norm, then linear)
        )
        self.head = nn.Linear(d_model, vocab_size)
        for linear in (self.decoder[1], self.decoder[4], self.head):
            nn.init.normal_(linear.weight, std=0.02)
            nn.init.zeros_(linear.bias)

    def encode(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, D) the encoder's state at the last position."""
        return self.encoder(input_ids)[:, -1]

    def decode(self, pooled: torch.Tensor, length: int) -> torch.Tensor:
        """(B, D) pooled vectors -> (B, length, D) hidden states of positions 0 .. length-1."""
        return self.decoder(pooled[:, None] + self.positions[:length])

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) token ids -> (B, T, D) decoder hidden states, or with ``positions`` (B, K) those positions' alone
        (apply ``logits`` where needed)."""
        hidden = self.decode(self.encode(input_ids), input_ids.shape[1])
        return hidden if positions is None else rows_at(hidden, positions)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., D) decoder hidden states -> (..., V) logits."""
        return self.head(hidden)

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
        """Mean cross-entropy of the logits at hidden states (..., D) against targets (...), over the targets that
        are not ``ignore_index`` (float32, 0-d; ``LanguageModel.loss``'s interface, its own biased head here)."""
        logits = self.logits(hidden)
        return cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index)

    def state_size(self, seq_len: int) -> int | None:
        """The encoder's inference state after ``seq_len`` tokens (``LanguageModel.state_size``)."""
        return self.encoder.state_size(seq_len)
