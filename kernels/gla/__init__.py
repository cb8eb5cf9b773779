"""Gated linear attention: a linear-attention state decayed by a per-key-channel forget gate.

``naive.gla_recurrent`` is the PyTorch reference used on CPU by ``gla``, ``retnet`` (a fixed decay per
head) and ``hgrn2`` (keys tied to the forget gate); on GPU those mixers call flash-linear-attention's
``chunk_gla`` / ``chunk_retention``, which compute the same recurrence chunk by chunk.
"""
