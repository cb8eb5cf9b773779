"""The language model's residual stream: each block's residual add is left to the norm after it
(``LayerNorm.after_add``); the model computes the same numbers as adding first and normalizing after, outputs and
every parameter's gradient, on the reference norms and on the Triton ones (interpreted on CPU)."""
import copy

import pytest
import torch
from torch import nn

import zoo.kernels.layer_norm as layer_norm_op
from zoo.kernels import backend
from zoo.model import LanguageModel


def unfused_forward(model: LanguageModel, ids: torch.Tensor) -> torch.Tensor:
    """The model's forward with every residual add apart from its norm: x + mixer(norm1(x)), x + mlp(norm2(x))."""
    x = model.embed(ids)
    if model.pos_embed is not None:
        x = x + model.pos_embed.weight[:ids.shape[1]]
    for block in model.blocks:
        x = x + block.mixer(block.norm1(x))
        if not isinstance(block.state_mixer, nn.Identity):
            x = x + block.state_mixer(block.norm2(x))
    return model.norm(x)


def output_and_grads(model, forward, ids, bf16, norms):
    model = copy.deepcopy(model)
    torch.manual_seed(1)  # the same dropout draws
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        hidden = forward(model, ids)
    assert backend.last_backend("layer_norm") == norms
    hidden.float().square().sum().backward()
    return [hidden] + [p.grad for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("mixer, state_mixer", [("softmax", "identity"), ("hyena", "mlp"), ("rwkv", "identity")])
@pytest.mark.parametrize("norms, bf16", [("naive", False), ("naive", True), ("triton", False)])
def test_fused_residual_adds_give_the_unfused_numbers(monkeypatch, mixer, state_mixer, norms, bf16):
    """Bit for bit. (Under bf16 autocast the Triton interpreter rounds the bf16 gradient toward zero where a GPU
    rounds to nearest; the GPU test of ``add_layer_norm`` covers that case.)"""
    if norms == "triton":
        monkeypatch.setattr(layer_norm_op, "named_or_gpu", lambda backend, name, x: backend in (name, "auto"))
    torch.manual_seed(0)
    model = LanguageModel(40, 32, n_layers=2, mixer=mixer, max_seq_len=16, state_mixer=state_mixer)
    ids = torch.randint(0, 40, (2, 16))
    fused = output_and_grads(model, lambda m, i: m(i), ids, bf16, norms)
    apart = output_and_grads(model, unfused_forward, ids, bf16, norms)
    assert len(fused) == len(apart) > 1
    for a, b in zip(fused, apart):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
