"""One run of a sweep: base scenario + overrides → one flat row (what a worker executes).

:func:`run_one` is a plain module-level function of plain data (a dict and a dict), so
any executor can ship it to another process or machine. It never raises for a bad run:
a combination the scenario rules or its compiler's check reject (before it runs,
:func:`clustersim.resolve_scenario`) is ``status = "invalid"``, a simulation that
fails is ``status = "error"``; both carry the message in ``error``; a run still going
after ``timeout_s`` seconds is stopped and is ``status = "timeout"``. Only interrupts
(``KeyboardInterrupt``, ``SystemExit``) propagate and stop the sweep.

The time limit is a ``SIGALRM`` timer in the process that runs the row (a worker of the
local pool, or this process with ``workers=1``): it interrupts the simulation between two
Python steps, so the worker stays alive for the next row. It needs the main thread of a
POSIX process, which is why :func:`~clustersim.experiments.sweeper.sweep` accepts a
timeout on the local executor only.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from ..errors import ScenarioError
from ..scenario import Scenario
from ..scenario.loader import apply_overrides
from ..simulate import checked, simulate

#: summary fields left out of rows: they differ from run to run of the same scenario, and
#: a sweep's rows must be identical on any executor and any number of workers
NONDETERMINISTIC = ("wall_time_s",)


class RunTimeout(BaseException):
    """A row's time limit passed (a BaseException, so no ``except Exception`` inside the
    simulation swallows it)."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`RunTimeout` in this (main) thread once ``seconds`` have passed."""
    if seconds is None:
        yield
        return

    def expire(signum, frame):
        # fire again soon in case this one is swallowed (raised inside a gc callback or a
        # __del__, Python only prints it); leaving time_limit disarms the timer
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        raise RunTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_one(
    base_raw: dict[str, Any], overrides: dict[str, Any], ids: dict[str, str], timeout_s: float | None = None
) -> dict[str, Any]:
    """Simulate ``base_raw`` with ``overrides``; return the row: the swept values,
    ``status``/``error``, the summary metrics and ``ids`` (``run_id``, ``base_id``).
    With ``timeout_s``, a run (loading included) still going after that many seconds
    stops and its row is ``status = "timeout"``."""
    row: dict[str, Any] = {**overrides, "status": "ok", "error": ""}
    try:
        with time_limit(timeout_s):
            try:
                sc = Scenario(apply_overrides(base_raw, overrides))
                run = checked(sc)  # refused by its compiler's check, as by the loader, before it runs
            except ScenarioError as exc:
                return {**row, "status": "invalid", "error": str(exc), **ids}
            try:  # (the sweep reports progress, not each row)
                res = simulate(run, progress=False)
            except Exception as exc:  # a failed run is a row, not the end of the sweep
                return {**row, "status": "error", "error": f"{type(exc).__name__}: {exc}", **ids}
    except RunTimeout:
        return {
            **row,
            "status": "timeout",
            "error": f"stopped after the time limit of {timeout_s:g} s",
            **ids,
        }
    row.update((k, v) for k, v in res.summary.items() if k not in NONDETERMINISTIC and k not in overrides)
    return {**row, **ids}
