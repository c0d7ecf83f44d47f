"""Experiments: design-space sweeps and parallelism search over many simulations.

``sweep(base, grid, zip=None, executor="local", workers=None, out=None)`` → DataFrame, one
row per run (swept values + summary), saved as runs finish and resumable.
``search(base, gpus=N)`` → :class:`SearchResult`: every valid plan, memory-pruned,
simulated, ranked and explained (its space a :class:`SearchSpace`, where its simulations
run an :class:`Execution`). Both run on a local process pool or a Dask cluster.
"""

import importlib

#: public name → (module of this package that defines it, its name there); imported on
#: first use (PEP 562), so the CLI can add its subcommands without loading pandas
_LAZY = {
    "EXECUTOR_NAMES": (".executors", "EXECUTOR_NAMES"),
    "Execution": (".plan_search", "Execution"),
    "InProcessExecutor": (".executors", "InProcessExecutor"),
    "SearchResult": (".plan_search", "SearchResult"),
    "SearchSpace": (".plan_search", "SearchSpace"),
    "estimate_peak_memory": (".memory", "estimate_peak_memory"),
    "expand_grid": (".grid", "expand"),
    "make_executor": (".executors", "make_executor"),
    "plan_space": (".plans", "plan_space"),
    "search": (".plan_search", "search"),
    "sweep": (".sweeper", "sweep"),
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = globals()[name] = getattr(importlib.import_module(module, __name__), attr)
    return value


def __dir__():
    return sorted({*globals(), *_LAZY})
