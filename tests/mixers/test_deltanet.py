"""DeltaNet with negative eigenvalues tracks parity with hand-set weights; with eigenvalues in [0, 1] it cannot."""
import pytest
import torch

from zoo.mixers.deltanet import DeltaNet, GatedDeltaNet

BIG = 20.0


def parity_layer(cls, negative_eigenvalues):
    """Head 0 (K = V = 1) stores the value written at BOS and negates it at every 1-bit.

    Input channels: 0 constant 1, 1 the bit, 2 BOS. k = q = 1 after the L2 norm; v = silu(10) at BOS, 0 after;
    beta logit 0 at BOS (beta 1 with negative eigenvalues: write v), +BIG at a 1-bit (beta 2: S -> -S) and
    -BIG at a 0-bit (beta 0: keep S). The per-head RMSNorm turns +-S into +-1.
    """
    kwargs = {"head_dim": 1, "expand_v": 1.0} if cls is GatedDeltaNet else {}
    layer = cls(4, num_heads=4, negative_eigenvalues=negative_eigenvalues, **kwargs)
    with torch.no_grad():
        for p in layer.parameters():
            p.zero_()
        for conv in (layer.q_conv, layer.k_conv, layer.v_conv):
            conv.conv.weight[..., -1] = 1  # pass the current step through
        layer.q_proj.weight[:, 0] = 1
        layer.k_proj.weight[:, 0] = 1
        layer.v_proj.weight[:, 2] = 10
        layer.b_proj.weight[:, 0], layer.b_proj.weight[:, 1], layer.b_proj.weight[:, 2] = -BIG, 2 * BIG, BIG
        layer.o_norm.weight.fill_(1)
        layer.o_proj.weight[0, 0] = 1
        if cls is GatedDeltaNet:
            layer.A_log.fill_(-BIG)  # decay exp(-e^-20 softplus(.)) = 1
            layer.g_proj.weight[:, 0] = 5  # output gate swish(5) > 0 keeps the sign
    return layer


def bits_to_inputs(bits):
    B, T = bits.shape
    x = torch.zeros(B, T + 1, 4)
    x[..., 0] = 1
    x[:, 0, 2] = 1
    x[:, 1:, 1] = bits
    return x


@pytest.mark.parametrize("cls", [DeltaNet, GatedDeltaNet])
def test_negative_eigenvalues_track_parity(cls):
    torch.manual_seed(0)
    bits = torch.randint(0, 2, (64, 8)).float()
    parity = bits.cumsum(1) % 2
    with torch.no_grad():
        y = parity_layer(cls, True)(bits_to_inputs(bits))[:, 1:, 0]
        y_pos = parity_layer(cls, False)(bits_to_inputs(bits))[:, 1:, 0]
    assert torch.equal(y < 0, parity.bool())
    assert (y_pos >= 0).all()  # same weights, beta in (0, 1): the state never changes sign, parity is lost
