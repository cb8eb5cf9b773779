"""RWKV-7: the recurrence against explicit transition matrices, and v_first's path through the model."""
import torch

from zoo.mixers.rwkv7 import RWKV7, rwkv7_recurrence_ref
from zoo.model import LanguageModel


def test_recurrence_matches_transition_matrices():
    torch.manual_seed(0)
    B, L, H, K = 2, 6, 2, 3
    r, k, v, a, b = (torch.randn(B, L, H, K, dtype=torch.float64) for _ in range(5))
    w = -torch.rand(B, L, H, K, dtype=torch.float64)
    S = torch.zeros(B, H, K, K, dtype=torch.float64)
    want = []
    for t in range(L):
        G = torch.diag_embed(torch.exp(w[:, t])) + b[:, t, ..., :, None] * a[:, t, ..., None, :]  # (B, H, K, K)
        S = G @ S + k[:, t, ..., :, None] * v[:, t, ..., None, :]
        want.append((r[:, t, ..., None, :] @ S).squeeze(-2))
    torch.testing.assert_close(rwkv7_recurrence_ref(r, w, k, v, a, b).double(), torch.stack(want, 1), rtol=1e-5, atol=1e-5)


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
