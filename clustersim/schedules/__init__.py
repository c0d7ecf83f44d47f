"""Pipeline schedules → Program. ``SCHEDULES`` is the registry ``clustersim list`` prints.

Registered here: ``gpipe``, ``1f1b`` (flushing, :mod:`.flush`); ``interleaved``
(:mod:`.interleaved`); ``zb_h1``, ``zb_h2`` (:mod:`.zero_bubble`); ``pipedream``,
``pipedream_2bw`` (:mod:`.pipedream`). Per-stage replication (``parallel.stage_replicas``)
compiles through :mod:`.replicated`. See ``docs/schedules.md``.
"""

from . import flush, interleaved, pipedream, zero_bubble  # noqa: F401  (register the schedules)
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
