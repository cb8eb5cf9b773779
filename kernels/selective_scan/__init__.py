"""Mamba-1's selective scan: a diagonal, input-dependent linear recurrence per channel and state.

``naive.selective_scan_naive`` is the PyTorch reference; ``fused_recurrent.selective_scan`` the Triton
kernel with the same signature (import it only where Triton is installed).
"""
