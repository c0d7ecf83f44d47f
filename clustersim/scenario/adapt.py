"""Defaults that adapt: a profile or preset never fills in what the scenario's own fields refuse.

``training.framework`` (:mod:`.frameworks`) and ``simulation.fidelity``
(:data:`~.schema.FIDELITY_PRESETS`) fill what a scenario leaves unstated. Where a value they
would fill cannot run with what the scenario states, they fill what can (TP overlap off,
per-layer granularity, no FSDP units, …) and record it: each choice is an entry of the
resolved scenario's ``adapted`` list (field, value, by whom, why). A field the user wrote
always wins; a conflict between written fields is refused naming one of them.

The functions read the raw (unvalidated) scenario: a malformed value reads as its default
here and is left for validation to report.
"""

from __future__ import annotations

from typing import Any

from ..schedules import SCHEDULES
from .schema import FIDELITY_PRESETS


def note(raw: dict[str, Any], field: str, value: object, by: str, why: str) -> None:
    """Record in ``raw``'s ``adapted`` list that ``by`` chose ``value`` for ``field`` because ``why``."""
    entry = {"field": field, "value": value, "by": by, "why": why}
    raw["adapted"] = [*raw.get("adapted", []), entry]


def section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """``raw``'s section ``name`` (empty when absent or malformed)."""
    value = raw.get(name)
    return value if isinstance(value, dict) else {}


def whole(value: object, default: int = 1) -> int:
    """``value`` when it is a whole number, else ``default`` (validation reports it)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def bidirectional(parallel: dict[str, Any]) -> bool:
    """Whether the raw ``parallel`` section's schedule sends micro-batches both ways (DualPipe)."""
    schedule = (
        SCHEDULES.get(parallel.get("schedule", "1f1b")) if isinstance(parallel.get("schedule"), str) else None
    )
    return schedule is not None and schedule.directions > 1


def layer_needed(raw: dict[str, Any]) -> str | None:
    """Why the scenario needs per-layer segments (None if it does not): context
    parallelism (its attention exchanges run inside each layer) or TP overlap the user wrote."""
    parallel = section(raw, "parallel")
    if whole(parallel.get("cp")) > 1:
        return "parallel.cp > 1 runs with per-layer segments only"
    if parallel.get("tp_comm_overlap") is True:
        return "parallel.tp_comm_overlap's chunks need per-layer segments"
    return None


def adapt_fidelity(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with ``simulation.granularity: layer`` stated where its fidelity preset
    would choose ``stage`` and the scenario needs per-layer segments (:func:`layer_needed`),
    recorded in ``adapted``; ``raw`` itself is not changed."""
    sim = section(raw, "simulation")
    name = sim.get("fidelity", "exact")
    preset = FIDELITY_PRESETS.get(name) if isinstance(name, str) else None
    why = layer_needed(raw)
    if preset is None or "granularity" in sim or preset["granularity"] == "layer" or why is None:
        return raw
    out = {**raw, "simulation": {**sim, "granularity": "layer"}}
    note(
        out, "simulation.granularity", "layer", f"simulation.fidelity: {name}", f"{why} (the preset's: stage)"
    )
    return out


def granularity(raw: dict[str, Any]) -> str:
    """The ``simulation.granularity`` the scenario runs at: stated, else its fidelity preset's."""
    sim = section(raw, "simulation")
    name = sim.get("fidelity", "exact")
    preset = FIDELITY_PRESETS.get(name if isinstance(name, str) else "exact", FIDELITY_PRESETS["exact"])
    return sim.get("granularity", preset["granularity"])
