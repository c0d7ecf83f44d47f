"""Loading clustersim's optional C accelerators: setup.py builds each where a C compiler works,
and the module it speeds up runs the same loops in Python — the same results bit for bit — where
it is absent or the environment variable ``CLUSTERSIM_NO_ACCEL`` is set (to anything but ``0``)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def load(module: str) -> ModuleType | None:
    """The compiled ``module`` (a dotted name), or None: not built (no compiler at install time,
    or a checkout never built) or switched off by ``CLUSTERSIM_NO_ACCEL``."""
    if os.environ.get("CLUSTERSIM_NO_ACCEL", "0") not in ("", "0"):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
