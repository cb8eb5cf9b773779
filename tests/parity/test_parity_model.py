"""zoo's whole language model against Zoology's (fixture ``zoology_lm``, see make_zoology_model.py): two blocks of
sliding-window attention, learned positions, a tied head, and Zoology's ``TransformerBlock`` with its Identity state
mixer, which zoo builds as ``state_mixer="normed"``. zoo's default ``state_mixer="identity"`` (no norm2(x) added after
each block) differs from it, and the fixture tells the two apart."""
import torch
from fixtures import load_fixture, max_abs_error
from test_parity_softmax import ZOOLOGY_NAMES

from zoo.model import LanguageModel

LAYER_NAMES = {**{f"mixer.{zoo}": f"sequence_mixer.{zoology}" for zoo, zoology in ZOOLOGY_NAMES.items()},
               **{f"{norm}.{w}": f"{norm}.{w}" for norm in ("norm1", "norm2") for w in ("weight", "bias")}}
NAMES = {"embed.weight": "backbone.embeddings.word_embeddings.weight",
         "pos_embed.weight": "backbone.embeddings.position_embeddings.weight",
         "norm.weight": "backbone.ln_f.weight", "norm.bias": "backbone.ln_f.bias",
         **{f"blocks.{i}.{zoo}": f"backbone.layers.{i}.{zoology}"
            for i in range(2) for zoo, zoology in LAYER_NAMES.items()}}


def logits_and_grads(state_mixer: str):
    """zoo's model with the fixture's weights: logits over every position, and each parameter's gradient for the
    fixture's upstream gradient (float64)."""
    fx = load_fixture("zoology_lm")
    model = LanguageModel(40, 32, n_layers=2, mixer="swa", mixer_kwargs={"num_heads": 1, "bias": True, "window": 6},
                          max_seq_len=12, state_mixer=state_mixer, positions="learned", dropout=0.0).double()
    assert set(dict(model.named_parameters())) == set(NAMES)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(fx[f"weight.{NAMES[name]}"])
    logits = model.logits(model(fx["ids"]))
    logits.backward(fx["glogits"])
    return fx, logits.detach(), {name: p.grad for name, p in model.named_parameters()}


def test_normed_state_mixer_is_zoology_language_model():
    fx, logits, grads = logits_and_grads("normed")
    assert max_abs_error(logits, fx["logits"]) < 1e-10
    for name, zoology in NAMES.items():
        assert max_abs_error(grads[name], fx[f"grad.{zoology}"]) < 1e-10, name


def test_zoo_identity_state_mixer_differs_from_zoology():
    fx, logits, _ = logits_and_grads("identity")
    assert max_abs_error(logits, fx["logits"]) > 1e-2
