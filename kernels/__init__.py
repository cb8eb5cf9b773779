"""zoo's sequence-mixing ops, one package per op (as flash-linear-attention lays them out).

``kernels/<op>/`` holds ``naive.py`` (the plain PyTorch reference, runs on CPU), the fast path(s) (our Triton
kernels with their autograd wrappers, or an optional package's op imported lazily) and, in ``__init__.py``,
one entry ``<op>(..., backend="auto")``; ``zoo.kernels.backend`` says how ``"auto"`` chooses and records which
backend each op last ran. Nothing here imports ``zoo``.
"""
