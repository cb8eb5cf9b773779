"""Triton kernels of zoo, each beside its plain PyTorch reference."""
