"""The language model that wraps a sequence mixer: embeddings, pre-norm blocks, tied head.

Shapes: ``input_ids`` (B, L) int64 -> hidden states (B, L, D) -> logits (..., V) only where asked,
so a task with few labelled positions (MQAR) never pays for the full (B, L, V) head.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from zoo.errors import ConfigError
from zoo.registry import get_mixer


class MLP(nn.Module):
    """Position-wise state mixer: D -> hidden_mult*D -> D with GELU."""

    def __init__(self, d_model: int, hidden_mult: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden_mult * d_model)
        self.fc2 = nn.Linear(hidden_mult * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x), approximate="tanh"))


STATE_MIXERS = {"identity": lambda d_model: nn.Identity(), "mlp": MLP}


class Block(nn.Module):
    """x + mixer(norm(x)), then x + state_mixer(norm(x)). (B, L, D) -> (B, L, D)."""

    def __init__(self, d_model: int, mixer: nn.Module, state_mixer: str):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.mixer = mixer
        self.norm2 = nn.LayerNorm(d_model)
        self.state_mixer = STATE_MIXERS[state_mixer](d_model)
        self.passes_layer_state = getattr(mixer, "uses_layer_state", False)

    def forward(self, x: torch.Tensor, layer_state: dict) -> torch.Tensor:
        h = self.norm1(x)
        x = x + (self.mixer(h, layer_state) if self.passes_layer_state else self.mixer(h))
        if not isinstance(self.state_mixer, nn.Identity):
            x = x + self.state_mixer(self.norm2(x))
        return x


class LanguageModel(nn.Module):
    """Token embedding (+ optional learned positions), ``n_layers`` blocks, final norm, tied head.

    Args:
        vocab_size: V, size of the input and output vocabulary.
        d_model: D, the model width.
        n_layers: number of blocks.
        mixer: registered sequence mixer name (see ``zoo.registry``).
        mixer_kwargs: extra keyword arguments for the mixer's constructor.
        max_seq_len: longest sequence the model will see (sizes position tables and filters).
        state_mixer: "identity" (Zoology's MQAR default) or "mlp".
        position_embeddings: learned absolute positions; None picks the mixer's own default
            (class attribute ``position_embeddings_by_default``, False when absent).
    """

    def __init__(self, vocab_size: int, d_model: int, n_layers: int = 2, mixer: str = "softmax",
                 mixer_kwargs: dict | None = None, max_seq_len: int = 2048,
                 state_mixer: str = "identity", position_embeddings: bool | None = None):
        super().__init__()
        if state_mixer not in STATE_MIXERS:
            raise ConfigError("model.state_mixer", state_mixer, list(STATE_MIXERS))
        mixer_cls = get_mixer(mixer)
        if position_embeddings is None:
            position_embeddings = getattr(mixer_cls, "position_embeddings_by_default", False)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_seq_len, d_model) if position_embeddings else None
        self.blocks = nn.ModuleList(
            Block(d_model, mixer_cls(d_model, layer_idx=i, max_seq_len=max_seq_len, **(mixer_kwargs or {})),
                  state_mixer)
            for i in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.max_seq_len = max_seq_len
        self._init_weights(n_layers)

    def _init_weights(self, n_layers: int) -> None:
        """GPT-2 initialisation of embeddings and MLPs; each mixer initialises its own parameters."""
        nn.init.normal_(self.embed.weight, std=0.02)
        if self.pos_embed is not None:
            nn.init.normal_(self.pos_embed.weight, std=0.02)
        for block in self.blocks:
            if isinstance(block.state_mixer, MLP):
                for fc in (block.state_mixer.fc1, block.state_mixer.fc2):
                    nn.init.zeros_(fc.bias)
                nn.init.normal_(block.state_mixer.fc1.weight, std=0.02)
                nn.init.normal_(block.state_mixer.fc2.weight, std=0.02 / math.sqrt(2 * n_layers))

    @classmethod
    def from_config(cls, cfg, device: torch.device | str | None = None) -> "LanguageModel":
        """The model of a run config (``zoo.config``); vocabulary and length come from its task.

        ``device="meta"`` builds it without memory or compute (to validate a config)."""
        from omegaconf import OmegaConf

        from zoo.config import max_seq_len, vocab_size

        m = cfg.model
        kwargs = dict(vocab_size=vocab_size(cfg), d_model=m.d_model, n_layers=m.n_layers, mixer=m.mixer,
                      mixer_kwargs=OmegaConf.to_container(m.mixer_kwargs), max_seq_len=max_seq_len(cfg),
                      state_mixer=m.state_mixer, position_embeddings=m.position_embeddings)
        with torch.device(device or "cpu"):
            return cls(**kwargs)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids -> (B, L, D) final hidden states (apply ``logits`` where needed)."""
        L = input_ids.shape[1]
        if L > self.max_seq_len:
            raise ValueError(f"sequence length {L} exceeds max_seq_len={self.max_seq_len}")
        x = self.embed(input_ids)
        if self.pos_embed is not None:
            x = x + self.pos_embed.weight[:L]
        layer_state: dict = {}
        for block in self.blocks:
            x = block(x, layer_state)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., D) hidden states -> (..., V) logits through the tied embedding."""
        return hidden @ self.embed.weight.t()

    def state_size(self, seq_len: int) -> int | None:
        """Bytes of recurrent state per sequence summed over layers; None if a mixer does not say."""
        sizes = [getattr(b.mixer, "state_size", None) for b in self.blocks]
        if any(s is None for s in sizes):
            return None
        return int(sum(s(seq_len) for s in sizes))
