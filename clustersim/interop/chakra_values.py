"""The values a Chakra trace carries, checked before they become a Program (docs/limits.md).

A protobuf field holds any number its type can: a ``duration_s`` of NaN or −1, a ``num_ops``
of −2^62, a ``comm_size`` of 2^63 bytes, a static-memory list of three entries. The engine
would run each of them and report nonsense (a negative MFU, an infinite iteration), so every
time, FLOP count, byte count and device list is held here to the ranges below, and a value
outside them is refused through the caller's ``fail`` (which names the file and the node).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from ..errors import short_repr
from ..memory_kinds import StaticMemory

#: longest compute op a trace may hold, in seconds (as ``model.forward``)
MAX_SECONDS = 1e6
#: most FLOPs one compute op may do (a whole frontier training run is ~10^25)
MAX_FLOPS = 1e24
#: most bytes one message, allocation or static-memory kind may hold: 1 PiB (as ``model.params``)
MAX_BYTES = 2**50
#: the static-memory kinds, in the order clustersim's export writes them
MEMORY_KINDS = tuple(StaticMemory.__dataclass_fields__)

Fail = Callable[[str], None]


def number(fail: Fail, name: str, value, top: float, unit: str):
    """``value`` of attribute ``name`` when it is a finite number from 0 to ``top``."""
    kind = type(value)
    if kind is float or kind is int:  # the common case, as below
        ok = 0 <= value <= top
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= top
    if not ok:  # (NaN fails 0 <= value)
        fail(f"attribute {name} = {short_repr(value)} is invalid; accepted: {unit} from 0 to {_shown(top)}")
    return value


def _shown(top: float) -> str:
    """An upper bound as docs/limits.md writes it: digits with commas, or 1e+24."""
    return f"{top:,.0f}" if top < 1e18 else f"{top:.0e}"


def seconds(fail: Fail, name: str, value) -> float:
    """A compute op's duration in seconds (0 … :data:`MAX_SECONDS`)."""
    return number(fail, name, value, MAX_SECONDS, "seconds")


def flops(fail: Fail, name: str, value) -> float:
    """A compute op's FLOP count (0 … :data:`MAX_FLOPS`)."""
    return number(fail, name, value, MAX_FLOPS, "FLOPs")


def nbytes(fail: Fail, name: str, value):
    """A byte count (0 … :data:`MAX_BYTES`)."""
    return number(fail, name, value, MAX_BYTES, "bytes")


def static_memory(fail: Fail, name: str, value) -> StaticMemory:
    """A rank's static memory: one byte count per kind of :data:`MEMORY_KINDS`."""
    if not isinstance(value, list) or len(value) != len(MEMORY_KINDS):
        fail(
            f"attribute {name} = {short_repr(value)} is invalid; accepted: a list of "
            f"{len(MEMORY_KINDS)} byte counts ({', '.join(MEMORY_KINDS)})"
        )
    return StaticMemory(
        *(nbytes(fail, f"{name}[{k}] ({kind})", v) for k, (kind, v) in enumerate(zip(MEMORY_KINDS, value)))
    )


def device_lists(fail: Fail, name: str, text, devices: int, size: int | None = None) -> tuple:
    """A JSON list of device-index lists (``shadows``: a send's (src, dst) pairs, a
    collective's further groups), each index 0 … ``devices``−1, each list ``size`` long
    when given."""
    rows = _json_rows(fail, name, text)
    for row in rows:
        if (size is not None and len(row) != size) or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < devices for d in row
        ):
            fail(
                f"attribute {name} holds {short_repr(row)}; accepted: lists of device indices "
                f"0..{devices - 1}" + (f", {size} per list" if size else "")
            )
    return tuple(tuple(row) for row in rows)


def byte_matrix(fail: Fail, name: str, text, members: int) -> tuple:
    """An all-to-all-v ``split``: ``members`` rows of ``members`` byte counts."""
    rows = _json_rows(fail, name, text)
    if len(rows) != members or any(len(row) != members for row in rows):
        fail(
            f"attribute {name} is not {members} × {members}; accepted: one row of byte counts per group member"
        )
    return tuple(
        tuple(nbytes(fail, f"{name}[{i}][{j}]", v) for j, v in enumerate(row)) for i, row in enumerate(rows)
    )


def _json_rows(fail: Fail, name: str, text) -> list[list]:
    """``text`` read as a JSON list of lists (``1e999`` and ``NaN`` refused, not read as inf)."""
    try:
        rows = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except (TypeError, ValueError) as exc:
        fail(f"attribute {name} = {short_repr(text)} is not a JSON list of lists ({exc})")
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        fail(f"attribute {name} = {short_repr(text)} is invalid; accepted: a JSON list of lists")
    return rows


def _no_constant(word: str):
    raise ValueError(f"{word} is not a number clustersim accepts")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value
