"""Experiments: design-space sweeps and parallelism search over many simulations.

``sweep(base, grid, zip=None, executor="local", workers=None, out=None)`` → DataFrame, one
row per run (swept values + summary), saved as runs finish and resumable.
``search(base, gpus=N)`` → :class:`SearchResult`: every valid plan, memory-pruned,
simulated, ranked and explained. Both run on a local process pool or a Dask cluster.
"""

from .executors import EXECUTOR_NAMES, InProcessExecutor, make_executor
from .grid import expand as expand_grid
from .memory import estimate_peak_memory
from .plan_search import SearchResult, search
from .plans import plan_space
from .sweeper import sweep

__all__ = [
    "EXECUTOR_NAMES",
    "InProcessExecutor",
    "SearchResult",
    "estimate_peak_memory",
    "expand_grid",
    "make_executor",
    "plan_space",
    "search",
    "sweep",
]
