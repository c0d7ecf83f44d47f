"""Pipeline schedules → Program. ``SCHEDULES`` is the registry ``clustersim list`` prints."""

from . import flush  # noqa: F401  (registers gpipe, 1f1b)
from .compiler import compile_pipeline
from .registry import SCHEDULES, Schedule, register_schedule

__all__ = ["SCHEDULES", "Schedule", "compile_pipeline", "register_schedule"]
