"""Lazy imports of optional packages (fla-core, mamba-ssm, ray), one helper for the whole repository."""
from __future__ import annotations

import functools
import importlib
import logging

log = logging.getLogger("zoo")


@functools.cache
def optional_import(module: str, purpose: str):
    """Import ``module`` or return None, saying once (per module) what falls back to the reference.

    Catches every ``ImportError``: packages such as mamba-ssm install but fail to import when their
    compiled extension does not match the installed torch.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        log.warning("zoo: %s not importable (%s); %s", module, err, purpose)
        return None
