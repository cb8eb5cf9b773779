"""Kernel tests run the Triton kernels on CPU through the interpreter when no GPU is present.

The variable must be set before triton compiles anything, hence here rather than in a test file.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
