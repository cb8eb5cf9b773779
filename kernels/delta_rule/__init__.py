"""The delta rule: a linear-attention state corrected toward each new value, optionally decayed.

``naive.delta_rule_recurrent`` is the PyTorch reference used on CPU by ``deltanet`` (no gate) and
``gated_deltanet`` (a scalar forget gate per head); on GPU those mixers call flash-linear-attention's
``chunk_delta_rule`` / ``chunk_gated_delta_rule``, which compute the same recurrence chunk by chunk.
"""
