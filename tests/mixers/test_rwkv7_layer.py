"""RWKV-7: v_first's path through the model (the recurrence is tested in tests/kernels/test_rwkv7.py)."""
import torch

from zoo.mixers.rwkv7 import RWKV7
from zoo.model import LanguageModel


def test_first_layer_values_reach_later_layers():
    torch.manual_seed(0)
    layer1 = RWKV7(32, layer_idx=1, head_dim=16)
    torch.nn.init.normal_(layer1.o_proj.weight)  # it starts at zero, as in fla
    x = torch.randn(2, 8, 32)
    v_first = torch.randn(2, 8, 32)
    assert not torch.allclose(layer1(x, {"v_first": v_first}), layer1(x, {"v_first": 2 * v_first}))
    model = LanguageModel(64, 32, n_layers=2, mixer="rwkv7", mixer_kwargs={"head_dim": 16}, max_seq_len=16)
    seen = {}
    model.blocks[1].mixer.register_forward_pre_hook(lambda m, args: seen.update(args[1]))
    model(torch.randint(0, 64, (2, 8)))
    assert seen["v_first"].shape == (2, 8, 32)
