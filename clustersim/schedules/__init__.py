"""Pipeline schedules: the per-stage orders of passes. ``SCHEDULES`` is the registry ``clustersim list`` prints.

Registered here: ``gpipe``, ``1f1b`` (flushing, :mod:`.flush`); ``interleaved``
(:mod:`.interleaved`); ``zb_h1``, ``zb_h2`` (:mod:`.zero_bubble`); ``pipedream``,
``pipedream_2bw`` (:mod:`.pipedream`). A schedule only orders passes: the compilers of
:mod:`clustersim.compilers` turn its orders into a Program (the pipeline compiler, and the
stage-replicated one for ``parallel.stage_replicas``). See ``docs/schedules.md``.
"""

import importlib
import pkgutil

from .registry import SCHEDULES, Schedule, register_schedule

__all__ = ["SCHEDULES", "Schedule", "register_schedule"]

# every module registers its schedules when imported (module order: flush, interleaved,
# pipedream, zero_bubble, …), so a new schedule is one new file
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
