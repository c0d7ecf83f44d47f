"""Warnings for bare numbers that are valid but implausible in base units.

A quantity without a unit is read in base units (bytes/s, seconds), so ``nic.bandwidth:
200`` is 200 bytes/s — a ten-day iteration, not the 200 Gbit/s its author meant. No
real link is slower than 1 MB/s and no link latency is over a second, so a bare number
past either bound gets a :class:`~clustersim.errors.ScenarioWarning` naming the unit it
probably meant. A value written with its unit (``"200 B/s"``) is taken as deliberate.
Fields are recognised by name (``bandwidth``, ``*_bandwidth``, ``latency``,
``*_latency``) anywhere in the scenario, topology options included.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

from ..errors import ScenarioWarning

#: a bare bandwidth below this (bytes/s) is probably in Gbit/s or GB/s
MIN_BANDWIDTH = 1e6
#: a bare latency above this (seconds) is probably in µs or ns
MAX_LATENCY = 1.0


def _quantity_key(key: str) -> bool:
    return key in ("bandwidth", "latency") or key.endswith(("_bandwidth", "_latency"))


def _bare_numbers(node: Any, path: str) -> Iterator[tuple[str, str, float]]:
    """(path, key, value) of every int/float leaf under ``node`` named like a bandwidth or a
    latency (bools excluded; an int past float's range is left to the field's own check)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        where = f"{path}.{key}" if path else str(key)
        if isinstance(value, (dict, list)):
            yield from _bare_numbers(value, where)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and _quantity_key(str(key)):
            try:
                yield where, str(key), float(value)
            except OverflowError:
                continue


def unit_hints(raw: dict[str, Any]) -> list[ScenarioWarning]:
    """The warnings of :mod:`this module <clustersim.scenario.unit_hints>` for a raw scenario."""
    out = []
    for where, key, value in _bare_numbers(raw, ""):
        if (key == "bandwidth" or key.endswith("_bandwidth")) and 0 < value < MIN_BANDWIDTH:
            out.append(
                ScenarioWarning(
                    where,
                    value,
                    f"is read as {value:g} bytes/s (no unit given); did you mean '{value:g} Gbit/s' "
                    f"or '{value:g} GB/s'? Write the unit to silence this",
                )
            )
        elif (key == "latency" or key.endswith("_latency")) and value > MAX_LATENCY:
            out.append(
                ScenarioWarning(
                    where,
                    value,
                    f"is read as {value:g} s (no unit given); did you mean '{value:g} us' or "
                    f"'{value:g} ns'? Write the unit to silence this",
                )
            )
    return out


def warn_unit_hints(raw: dict[str, Any]) -> None:
    """Issue each of :func:`unit_hints` as a :class:`ScenarioWarning`."""
    for w in unit_hints(raw):
        warnings.warn(w, stacklevel=4)
