"""Without a GPU, Triton kernels run on CPU through the interpreter.

The variable must be set before any module defines a ``@triton.jit`` kernel, and the mixers import
the kernels, so it is set here, in the root conftest that pytest loads before any test module.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
