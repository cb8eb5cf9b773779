"""The language model that wraps a sequence mixer: embeddings, pre-norm blocks, tied head.

Shapes: ``input_ids`` (B, L) int64 -> hidden states (B, L, D) -> logits (..., V) only where asked,
so a task with few labelled positions (MQAR) never pays for the full (B, L, V) head.
"""
from __future__ import annotations

import inspect
import math

import torch
from torch import nn

from zoo.kernels.embedding import Embedding
from zoo.kernels.layer_norm import LayerNorm
from zoo.kernels.linear import linear
from zoo.kernels.linear_cross_entropy import linear_cross_entropy
from zoo.kernels.rows import rows_at
from zoo.errors import ConfigError
from zoo.mixers.registry import POSITIONS, get_mixer

INITS = ("zoology", "mixer")


class MLP(nn.Module):
    """Position-wise state mixer: D -> hidden_mult*D -> D with GELU."""

    def __init__(self, d_model: int, hidden_mult: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden_mult * d_model)
        self.fc2 = nn.Linear(hidden_mult * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x), approximate="tanh"))


# What a block does after its mixer (``model.state_mixer``). "identity": nothing, x + mixer(norm1(x)) alone. "normed":
# Zoology's ``TransformerBlock`` with its ``torch.nn.Identity`` state mixer (Zoology's MQAR models but Mamba's), which
# still adds the identity of norm2's output: x + norm2(x) after the mixer's add. "mlp": x + mlp(norm2(x)).
STATE_MIXERS = {"identity": lambda d_model: None, "normed": lambda d_model: nn.Identity(), "mlp": MLP}


# A mixer that can compute its outputs at some rows alone (``outputs_at_positions``) is asked to in the last block
# when those rows are at most this share of the sequence (MQAR: 1/16 to 1/8); for more, its full form is cheaper.
PICKED_SHARE = 0.25


class Block(nn.Module):
    """x + mixer(norm1(x)), then x + state_mixer(norm2(x)) unless the state mixer is "identity". (B, L, D) -> (B, L, D).

    Each residual addition is left to the norm that reads its result (``LayerNorm.after_add``: one pass each way on
    a GPU, the numbers of the add and the norm apart): ``forward(x, update, ..., pre)`` first adds ``update``, the
    previous block's last output (or the first block's learned positions, None if the model has none), and
    returns the stream with its own last output, not yet added, and its ``pre``: with the "normed" state mixer the
    block's norm2, whose output is added to the stream after the update (s = s1 + norm2(s1), s1 = x + update), also
    left to the next norm (one pass each way for both norms and both adds); else None. ``LanguageModel.forward``
    adds the last ones in its final norm.

    With ``positions`` (B, K) only those rows of the block's outputs are wanted (the last block: its outputs reach
    the head alone, and the state mixer works row by row): it returns (B, K, D) rows. A mixer with
    ``outputs_at_positions`` then computes its output at those rows alone (attention: K queries instead of L; the
    recurrent and convolutional mixers: their last projection) when K <= ``PICKED_SHARE`` * L; any other mixer's
    output is picked after it, and the stream's rows are picked by norm1 (``add_layer_norm``'s ``rows``: their
    gradient added in its backward pass). The loss and every gradient are those of the full computation (the rows
    left out reach no loss); only attention dropout draws other random numbers. The positions of a sequence are
    distinct (``zoo.data`` pads them with distinct unlabelled rows): on a GPU a repeated one's gradients would not
    add up. The first block may take token ids (B, L) for x and the embedding table as ``table``: norm1 then gathers
    the stream's rows itself and applies ``embed_dropout`` to them (``LayerNorm.after_embedding``: no gathered copy
    written and read back).
    """

    def __init__(self, d_model: int, mixer: nn.Module, state_mixer: str):
        super().__init__()
        # a norm whose output feeds one matmul alone writes it in autocast's dtype (LayerNorm's to_matmul)
        self.norm1 = LayerNorm(d_model, to_matmul=getattr(mixer, "input_feeds_one_matmul", False))
        self.mixer = mixer
        self.norm2 = LayerNorm(d_model, to_matmul=state_mixer == "mlp")  # then read by the MLP's fc1 alone
        self.state_mixer = STATE_MIXERS[state_mixer](d_model)
        self.passes_layer_state = getattr(mixer, "uses_layer_state", False)
        self.mixer_picks = getattr(mixer, "outputs_at_positions", False)
        self.adds_norm2 = state_mixer == "normed"  # its state mixer is the identity of norm2's output

    def forward(self, x: torch.Tensor, update: torch.Tensor | None, layer_state: dict,
                positions: torch.Tensor | None = None, table: torch.Tensor | None = None, embed_dropout: float = 0.0,
                pre: LayerNorm | None = None) -> tuple[torch.Tensor, torch.Tensor, LayerNorm | None]:
        if table is not None:  # x holds token ids: the stream is dropout(table[x] (+ update)), gathered by norm1
            x, h = self.norm1.after_embedding(x, table, update, rows=positions, dropout=embed_dropout)
        else:  # with positions, the norm returns the stream at those rows alone (its gradient comes back as rows)
            x, h = self.norm1.after_add(x, update, rows=positions, pre=pre)
        args = (h, layer_state) if self.passes_layer_state else (h,)
        if positions is None:
            update = self.mixer(*args)
        elif self.mixer_picks and positions.shape[1] <= PICKED_SHARE * h.shape[1]:
            update = self.mixer(*args, positions=positions)
        else:
            update = rows_at(self.mixer(*args), positions)
        if self.adds_norm2:
            return x, update, self.norm2
        if self.state_mixer is not None:
            x, h = self.norm2.after_add(x, update)
            update = self.state_mixer(h)
        return x, update, None


def zoology_init(model: nn.Module, n_layers: int, mamba_block: bool = False, std: float = 0.02) -> None:
    """Zoology's ``_init_weights`` (zoology/model.py at dbcb60d), applied to the whole model after it is built.

    Every ``nn.Linear`` weight, inside mixers too, gets N(0, std) and its bias zero; every ``nn.Embedding``
    N(0, std); then any parameter whose name contains ``out_proj.weight``, ``fc2.weight`` or
    ``output_linear.0.weight`` gets N(0, std / sqrt(2 * n_layers)). Norms and other ``nn.Parameter``s
    (decays, gains, filters) keep the mixer's own values. Zoology switches to another rule for its
    Mamba blocks (chosen by a block-type name containing "Mamba"; here by a mixer class name containing
    it): Linear weights keep their PyTorch init, biases are zeroed unless marked ``_no_reinit``,
    embeddings get N(0, std), and weights named exactly ``out_proj.weight`` / ``fc2.weight`` in their
    module are redrawn by ``kaiming_uniform_(a=sqrt(5))`` and divided by sqrt(n_layers).
    """
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, nn.Linear):
            if module.bias is not None and not (mamba_block and getattr(module.bias, "_no_reinit", False)):
                nn.init.zeros_(module.bias)
            if not mamba_block:
                nn.init.normal_(module.weight, std=std)
    for name, p in model.named_parameters():
        if mamba_block and name.split(".")[-2:] in (["out_proj", "weight"], ["fc2", "weight"]):
            nn.init.kaiming_uniform_(p, a=math.sqrt(5))
            with torch.no_grad():
                p /= math.sqrt(n_layers)
        elif not mamba_block and any(s in name for s in ("out_proj.weight", "fc2.weight", "output_linear.0.weight")):
            nn.init.normal_(p, std=std / math.sqrt(2 * n_layers))


def layer_mixers(mixer: str, mixer_kwargs: dict, n_layers: int, layers: list[dict] | None) -> list[tuple[str, dict]]:
    """(mixer, kwargs) of every layer: ``mixer`` with ``mixer_kwargs``, unless ``layers`` (one dict per layer,
    ``{"mixer": ..., "mixer_kwargs": ...}``, either key optional) overrides a layer. A layer that names another
    mixer without kwargs gets none (the model's ``mixer_kwargs`` belong to ``mixer``)."""
    if layers is None:
        return [(mixer, dict(mixer_kwargs))] * n_layers
    if len(layers) != n_layers:
        raise ConfigError("model.layers", layers, f"a list of n_layers={n_layers} per-layer settings")
    specs = []
    for spec in layers:
        name = spec.get("mixer") or mixer
        kwargs = spec.get("mixer_kwargs")
        specs.append((name, dict(kwargs if kwargs is not None else (mixer_kwargs if name == mixer else {}))))
    return specs


def mixer_label(mixer: str, n_layers: int, layers: list[dict] | None) -> str:
    """The name a run's model goes by in results: its mixer, or the layers' mixers joined by "+"."""
    names = [name for name, _ in layer_mixers(mixer, {}, n_layers, layers)]
    return mixer if len(set(names)) == 1 and names[0] == mixer else "+".join(names)


class LanguageModel(nn.Module):
    """Token embedding (+ optional learned positions), ``n_layers`` blocks, final norm, tied head.

    Args:
        vocab_size: V, size of the input and output vocabulary.
        d_model: D, the model width.
        n_layers: number of blocks.
        mixer: registered sequence mixer name (see ``zoo.mixers.registry``).
        mixer_kwargs: extra keyword arguments for the mixer's constructor.
        max_seq_len: longest sequence the model will see (sizes position tables and filters).
        state_mixer: "identity" (nothing after the mixer), "normed" (Zoology's MQAR blocks: its Identity state mixer
            still adds norm2(x) to the stream) or "mlp"; see ``STATE_MIXERS``. The default, "identity", is not
            Zoology's block: every committed result was trained with it, so it stays; "normed" restores Zoology's.
        positions: "learned" (absolute position table added to the embeddings), "rope" (rotary, applied
            to queries and keys by mixers that take ``positions``), "none", or None for the mixer's own
            default (class attribute ``default_positions``, "none" when absent).
        init: "zoology" (``zoology/model.py _init_weights``, see :func:`zoology_init`) or "mixer"
            (GPT-2 init of embeddings and MLPs, every mixer initialises its own parameters).
        dropout: attention dropout, given to mixers that take ``dropout``.
        embed_dropout: dropout on the embeddings (plus learned positions) before the first block, as Zoology's
            ``embed_dropout``. A run config's default is Zoology's 0.1 (``zoo.config.ModelConfig``, README "Model
            setup"); a model built directly gets 0, so a mixer without dropout of its own adds no random op in
            training mode (the GPU-against-CPU tests compare such models' training-mode outputs).
        layers: per-layer overrides of ``mixer``/``mixer_kwargs`` (a hybrid model, e.g. BaseConv and sliding
            windows as in BASED, or attention in one layer of a recurrent model); see :func:`layer_mixers`.

    The model gives ``n_layers``, ``dropout`` and ``positions`` to a mixer whose constructor has a
    parameter of that name (``zoo.mixers.registry.MODEL_OPTIONS``, not settable as mixer kwargs), so every mixer gets the same values.
    """

    def __init__(self, vocab_size: int, d_model: int, n_layers: int = 2, mixer: str = "softmax",
                 mixer_kwargs: dict | None = None, max_seq_len: int = 2048,
                 state_mixer: str = "identity", positions: str | None = None, init: str = "zoology",
                 dropout: float = 0.1, layers: list[dict] | None = None, embed_dropout: float = 0.0):
        super().__init__()
        if n_layers < 1:  # the first block's norm gathers the embedding, the final norm adds the last block's output
            raise ConfigError("model.n_layers", n_layers, "at least 1")
        if not 0 <= embed_dropout < 1:
            raise ConfigError("model.embed_dropout", embed_dropout, "a probability in [0, 1)")
        if state_mixer not in STATE_MIXERS:
            raise ConfigError("model.state_mixer", state_mixer, list(STATE_MIXERS))
        if init not in INITS:
            raise ConfigError("model.init", init, list(INITS))
        specs = layer_mixers(mixer, mixer_kwargs or {}, n_layers, layers)
        classes = [get_mixer(name) for name, _ in specs]
        if positions is None:  # learned if any layer's mixer wants them, else the first layer's default
            defaults = [getattr(c, "default_positions", "none") for c in classes]
            positions = "learned" if "learned" in defaults else defaults[0]
        if positions not in POSITIONS:
            raise ConfigError("model.positions", positions, list(POSITIONS) + [None])
        options = dict(n_layers=n_layers, dropout=dropout, positions=positions)
        takes = [inspect.signature(c.__init__).parameters for c in classes]
        if positions == "rope" and not any("positions" in t for t in takes):
            raise ConfigError("model.positions", positions, f"learned or none: no layer's mixer applies RoPE "
                                                            f"({', '.join(name for name, _ in specs)})")
        self.embed = Embedding(vocab_size, d_model)  # an nn.Embedding; its GPU backward is a deterministic Triton sum
        self.pos_embed = nn.Embedding(max_seq_len, d_model) if positions == "learned" else None
        self.embed_dropout = embed_dropout
        self.blocks = nn.ModuleList(
            Block(d_model, cls(d_model, layer_idx=i, max_seq_len=max_seq_len,
                               **{k: v for k, v in options.items() if k in takes[i]}, **kwargs), state_mixer)
            for i, (cls, (_, kwargs)) in enumerate(zip(classes, specs))
        )
        self.norm = LayerNorm(d_model, to_matmul=True)  # read by the tied head alone
        self.max_seq_len = max_seq_len
        if init == "zoology":
            zoology_init(self, n_layers, mamba_block=any("Mamba" in c.__name__ for c in classes))
        else:
            self._init_embeddings_and_mlps(n_layers)

    def _init_embeddings_and_mlps(self, n_layers: int) -> None:
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

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L) token ids -> (B, L, D) final hidden states, or with ``positions`` (B, K) those positions' alone
        (distinct within a sequence), (B, K, D) (apply ``logits`` where needed). The last block and the final norm
        then work on the K picked rows only (``Block``): a task with few labelled positions (MQAR's K = L / 16 at
        N=256) skips the rest."""
        L = input_ids.shape[1]
        if L > self.max_seq_len:
            raise ValueError(f"sequence length {L} exceeds max_seq_len={self.max_seq_len}")
        pos = None if self.pos_embed is None else self.pos_embed.weight[:L]
        # The first block's norm gathers the rows, adds the positions to every sequence (their gradient a column sum
        # of the stream's) and applies the embedding dropout: one pass each way. ``update`` is what the next norm
        # adds to x first: the positions, then each block's output.
        x, table, update = input_ids, self.embed.weight, pos
        dropout = self.embed_dropout if self.training else 0.0
        layer_state: dict = {}
        last, pre = len(self.blocks) - 1, None
        for i, block in enumerate(self.blocks):
            x, update, pre = block(x, update, layer_state, positions if i == last else None,
                                   table if i == 0 else None, dropout, pre)
        return self.norm.after_add(x, update, pre=pre)[1]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., D) hidden states -> (..., V) logits through the tied embedding (``zoo.kernels.linear``: under bf16
        autocast on a GPU its weight gradient comes out of the matmul in float32, with no cast kernel)."""
        return linear(hidden, self.embed.weight, None)

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
        """Mean cross-entropy of the tied head's logits at hidden states (..., D) against targets (...), over the
        targets that are not ``ignore_index`` (float32, 0-d): ``cross_entropy(logits(hidden), targets)`` as one op
        (``zoo.kernels.linear_cross_entropy``; on a GPU the logits' gradient is written while the loss is)."""
        return linear_cross_entropy(hidden.flatten(0, -2), self.embed.weight, targets.flatten(), ignore_index)

    def state_size(self, seq_len: int) -> int | None:
        """Values (elements, not bytes) of state one sequence needs at inference after ``seq_len``
        tokens, summed over layers; None if a mixer does not say."""
        sizes = [getattr(b.mixer, "state_size", None) for b in self.blocks]
        if any(s is None for s in sizes):
            return None
        return int(sum(s(seq_len) for s in sizes))
