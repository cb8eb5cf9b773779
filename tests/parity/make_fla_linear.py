"""Parity fixtures of the linear-attention ops from flash-linear-attention 0.6.0's own PyTorch references.

fla's naive functions run on CPU: ``pip install --no-deps fla_core-0.6.0-py3-none-any.whl
flash_linear_attention-0.6.0-py3-none-any.whl``, then ``python tests/parity/make_fixtures.py fla_linear``.
Inputs are random, with beta in (0, 2) so the negative-eigenvalue range is covered.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fixtures import save_fixture

B, T, H, K, V = 2, 32, 2, 8, 16


def bthk(*shape):
    return torch.randn(B, T, *shape)


def make() -> None:
    from fla.ops.delta_rule.naive import delta_rule_chunkwise, delta_rule_recurrence
    from fla.ops.gated_delta_rule.gate import naive_gdn_gate
    from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule, naive_recurrent_gated_delta_rule
    from fla.ops.gla.naive import naive_recurrent_gla
    from fla.ops.retention.naive import naive_retention

    torch.manual_seed(0)
    q, k, v = bthk(H, K), bthk(H, K), bthk(H, V)
    gk = F.logsigmoid(bthk(H, K)) / 4
    save_fixture("fla_gla", {"q": q, "k": k, "v": v, "g": gk, "o": naive_recurrent_gla(q, k, v, gk)[0]})

    heads_first = lambda t: t.transpose(1, 2).contiguous()  # noqa: E731  fla's delta-rule naive is [B, H, T, K]
    o = naive_retention(heads_first(q), heads_first(k), heads_first(v))
    save_fixture("fla_retention", {"q": q, "k": k, "v": v, "o": heads_first(o)})

    kn = F.normalize(k, dim=-1)
    beta = 2 * torch.rand(B, T, H)
    o_rec = delta_rule_recurrence(*map(heads_first, (q, kn, v)), beta.transpose(1, 2))[0]
    o_chunk = delta_rule_chunkwise(*map(heads_first, (q, kn, v)), beta.transpose(1, 2), chunk_size=16)[0]
    save_fixture("fla_delta_rule", {"q": q, "k": kn, "v": v, "beta": beta, "o_recurrent": heads_first(o_rec),
                                    "o_chunk": heads_first(o_chunk)})

    a, A_log, dt_bias = torch.randn(B, T, H), torch.log(torch.rand(H) * 16), torch.randn(H)
    g = naive_gdn_gate(a, A_log, dt_bias)
    o_rec = naive_recurrent_gated_delta_rule(q, kn, v, beta, g)[0]
    o_chunk = naive_chunk_gated_delta_rule(q, kn, v, g, beta, chunk_size=16)[0]
    save_fixture("fla_gated_delta_rule", {"q": q, "k": kn, "v": v, "beta": beta, "a": a, "A_log": A_log,
                                          "dt_bias": dt_bias, "g": g, "o_recurrent": o_rec, "o_chunk": o_chunk})
