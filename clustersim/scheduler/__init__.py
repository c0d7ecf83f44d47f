"""A scheduler on one fabric (docs/scheduler.md): jobs arrive (a trace or a seeded
process), wait in a queue with a policy (FIFO, EASY backfill, priorities with
preemption), are placed by the multi-job placement policies and run with the jobs that
overlap them on the shared fabric, re-simulated piecewise whenever the set changes."""

from ..scenario.queue import QueueScenario
from .run import Schedule, schedule

__all__ = ["QueueScenario", "Schedule", "schedule"]
