"""One run of a sweep: base scenario + overrides → one flat row (what a worker executes).

:func:`run_one` is a plain module-level function of plain data (a dict and a dict), so
any executor can ship it to another process or machine. It never raises for a bad run:
a combination the scenario rules reject is ``status = "invalid"``, a simulation that
fails is ``status = "error"``; both carry the message in ``error``. Only interrupts
(``KeyboardInterrupt``, ``SystemExit``) propagate and stop the sweep.
"""

from __future__ import annotations

from typing import Any

from ..errors import ScenarioError
from ..scenario import Scenario
from ..scenario.loader import apply_overrides
from ..simulate import simulate

#: summary fields left out of rows: they differ from run to run of the same scenario, and
#: a sweep's rows must be identical on any executor and any number of workers
NONDETERMINISTIC = ("wall_time_s",)


def run_one(base_raw: dict[str, Any], overrides: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    """Simulate ``base_raw`` with ``overrides``; return the row: the swept values,
    ``status``/``error``, the summary metrics and ``ids`` (``run_id``, ``base_id``)."""
    row: dict[str, Any] = {**overrides, "status": "ok", "error": ""}
    try:
        sc = Scenario(apply_overrides(base_raw, overrides))
    except ScenarioError as exc:
        return {**row, "status": "invalid", "error": str(exc), **ids}
    try:
        res = simulate(sc)
    except Exception as exc:  # a failed run is a row, not the end of the sweep
        return {**row, "status": "error", "error": f"{type(exc).__name__}: {exc}", **ids}
    row.update((k, v) for k, v in res.summary.items() if k not in NONDETERMINISTIC and k not in overrides)
    return {**row, **ids}
