"""RWKV-4's WKV operator: a per-channel, exponentially decayed, normalized running average of values.

``naive.wkv4_naive`` is the PyTorch reference; ``fused_recurrent.wkv4`` the Triton kernel with the same
signature (import it only where Triton is installed).
"""
