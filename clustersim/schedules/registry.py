"""The schedule registry: the names users type in ``parallel.schedule``.

A schedule is, for each pipeline stage, the order in which that stage runs its
micro-batches' forward (``"F"``) and backward (``"B"``) passes — a function
``order(stage, p, m) -> list[(phase, microbatch)]``. The pipeline compiler turns those
orders into a Program (sends, receives, memory, optimizer step); the engine never knows
which schedule produced it. Register your own with :func:`register_schedule`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

OrderFn = Callable[[int, int, int], list[tuple[str, int]]]


@dataclass(frozen=True)
class Schedule:
    """A registered schedule: its name, per-stage order function and one-line description."""

    name: str
    order: OrderFn
    description: str


SCHEDULES: dict[str, Schedule] = {}


def register_schedule(name: str, description: str = "") -> Callable[[OrderFn], OrderFn]:
    """Decorator: register ``order(stage, p, m)`` under ``name`` (replacing any same name).

    Example — a schedule that runs all forwards, then backwards in the same order::

        @cs.register_schedule("gpipe_fifo", "GPipe with first-in-first-out backwards")
        def gpipe_fifo(stage, p, m):
            return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    """

    def wrap(fn: OrderFn) -> OrderFn:
        doc = description or (fn.__doc__ or "").strip().splitlines()[0:1]
        SCHEDULES[name] = Schedule(name, fn, doc if isinstance(doc, str) else "".join(doc))
        return fn

    return wrap
