"""Pipeline schedules → Program. ``SCHEDULES`` is the registry ``clustersim list`` prints.

Registered here: ``gpipe``, ``1f1b`` (flushing, :mod:`.flush`); ``interleaved``
(:mod:`.interleaved`); ``zb_h1``, ``zb_h2`` (:mod:`.zero_bubble`); ``pipedream``,
``pipedream_2bw`` (:mod:`.pipedream`). Per-stage replication (``parallel.stage_replicas``)
compiles through :mod:`.replicated`. See ``docs/schedules.md``.
"""

import importlib
import pkgutil

from .compiler import compile_pipeline, emit_pass
from .registry import SCHEDULES, Schedule, register_schedule
from .versions import max_versions_alive, update_staleness

__all__ = [
    "SCHEDULES",
    "Schedule",
    "compile_pipeline",
    "emit_pass",
    "max_versions_alive",
    "register_schedule",
    "update_staleness",
]

# every module registers its schedules when imported (module order: flush, interleaved,
# pipedream, zero_bubble, …), so a new schedule is one new file
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
