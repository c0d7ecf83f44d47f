"""Collective communication as point-to-point steps on a fabric.

Each algorithm (ring, tree, halving_doubling, hierarchical, direct, parameter_server)
compiles a collective into per-rank send schedules (:mod:`.schedule`); the executor runs
them on the fabric, so bus bandwidth emerges from the links and contention is real. The
engine calls :func:`run_collective` once every member has reached the op. Every module of
this package is imported here, so an algorithm module registers itself
(:mod:`.algorithm`): a new algorithm is one new file.
"""

import importlib
import pkgutil

from .algorithm import Options, Tuning
from .api import run_collective
from .cost import Shape
from .group import DEFAULT_ALPHA, Group, resolve_alpha
from .registry import ALGORITHMS, KINDS, Algorithm, choose_algorithm, estimate_time

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ALPHA",
    "KINDS",
    "Algorithm",
    "Group",
    "Options",
    "Shape",
    "Tuning",
    "choose_algorithm",
    "estimate_time",
    "resolve_alpha",
    "run_collective",
]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
