"""Lazy imports of optional packages (fla-core, mamba-ssm, ray): the kernels' helper, one for the whole repo."""
from __future__ import annotations

from kernels.backend import optional_import

__all__ = ["optional_import"]
