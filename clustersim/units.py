"""One parser for every quantity a scenario may hold.

Quantities are numbers in base units (seconds, bytes, bytes/s, FLOP/s, FLOPs) or
strings with a unit: ``"1.5 ms"``, ``"200 Gbit/s"``, ``"25 GB/s"``, ``"16 MiB"``,
``"312 TFLOP/s"``. Units are converted here, at the edge, and nowhere else: inside
clustersim time is float seconds, sizes are int bytes, rates are float bytes/s.

A typed options model holds the parsed number: :func:`quantity` is a parser as a pydantic
validator (``Annotated[float, quantity("time")]``), so the code that reads the model gets
base units, and a bad value is refused when the model is validated, naming what is accepted.

Decimal prefixes (k, M, G, T, P) are powers of 1000; binary prefixes (Ki, Mi, Gi, Ti)
are powers of 1024. ``b``/``bit`` means bits (divided by 8 into bytes); ``B`` means bytes.
"""

from __future__ import annotations

import math
import re

from pydantic import BeforeValidator

from .errors import ScenarioError

_DEC = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

_SIZE_UNITS = {
    "bytes": re.compile(r"(Ki|Mi|Gi|Ti|Pi|[kKMGTPE]?)(B|bit|b)"),
    "bandwidth": re.compile(r"(Ki|Mi|Gi|Ti|[kKMGTP]?)(B|bit|b)(/s|ps)"),
}

_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_RE = re.compile(rf"^\s*{_NUM}\s*([A-Za-zµ/]*)\s*$")

#: what each kind of quantity is measured in, for error messages
KIND_UNITS = {
    "time": "a time such as 1.5 ms, 30 us, 2 s (bare numbers are seconds)",
    "bytes": "a size such as 16 MiB, 80 GiB, 4096 B (bare numbers are bytes)",
    "bandwidth": "a rate such as 200 Gbit/s, 25 GB/s (bare numbers are bytes/s)",
    "flops": "a rate such as 312 TFLOP/s (bare numbers are FLOP/s)",
}


def _prefix(p: str) -> float | None:
    if p in _BIN:
        return _BIN[p]
    return _DEC.get(p)


def _convert(num: float, unit: str, kind: str) -> float | None:
    if unit == "":
        return num
    if kind == "time":
        return num * _TIME[unit] if unit in _TIME else None
    if kind in _SIZE_UNITS:  # bytes and bandwidth: a prefix, then B (bytes) or b/bit (bits)
        m = _SIZE_UNITS[kind].fullmatch(unit)
        if not m:
            return None
        return num * _prefix(m.group(1)) / (8.0 if m.group(2) in ("b", "bit") else 1.0)
    if kind == "flops":
        m = re.fullmatch(r"([kKMGTPE]?)(FLOP|FLOPS|flop|flops)(/s)?", unit)
        if not m:
            return None
        return num * _DEC[m.group(1)]
    raise ValueError(f"unknown quantity kind {kind!r}")


def parse(value: object, kind: str, field: str = "value") -> float:
    """Parse ``value`` as a quantity of ``kind`` ('time', 'bytes', 'bandwidth', 'flops').

    Returns the value in base units as a float. Raises :class:`ScenarioError` naming
    ``field`` when the value is not a quantity of that kind.
    """
    if isinstance(value, bool):
        raise ScenarioError(field, value, f"expected {KIND_UNITS[kind]}")
    if isinstance(value, (int, float)):
        return _finite(value, kind, field)
    if isinstance(value, str):
        m = _RE.match(value)
        if m:
            num = float(m.group(1))
            if num == 0 and re.search(r"[1-9]", m.group(1).lower().partition("e")[0]):
                raise ScenarioError(field, value, "too small to tell from 0; give 0 or a larger value")
            out = _convert(num, m.group(2), kind)
            if out is not None:
                return _finite(out, kind, field, value)
    raise ScenarioError(field, value, f"expected {KIND_UNITS[kind]}")


def _finite(num: float, kind: str, field: str, shown: object = None) -> float:
    """``num`` as a float when it is finite; infinity, NaN or an int past float's range
    (10³⁰⁹) is refused — no quantity of a real cluster is that large."""
    try:
        out = float(num)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ScenarioError(
            field, num if shown is None else shown, f"expected a finite number: {KIND_UNITS[kind]}"
        )
    return out


def parse_time(value: object, field: str = "value") -> float:
    """Seconds from a time quantity ("1.5 ms" → 0.0015)."""
    return parse(value, "time", field)


def parse_bytes(value: object, field: str = "value") -> int:
    """Whole bytes from a size quantity ("16 MiB" → 16777216)."""
    return int(round(parse(value, "bytes", field)))


def parse_bandwidth(value: object, field: str = "value") -> float:
    """Bytes per second from a rate ("200 Gbit/s" → 2.5e10)."""
    return parse(value, "bandwidth", field)


def parse_flops(value: object, field: str = "value") -> float:
    """FLOP/s from a compute rate ("312 TFLOP/s" → 3.12e14)."""
    return parse(value, "flops", field)


def quantity(kind: str) -> BeforeValidator:
    """:func:`parse` of ``kind`` ('time', 'bytes', 'bandwidth', 'flops') as a pydantic
    validator: the model holds the parsed number, and a bad value is the ValueError pydantic
    reports under the field's path, its text saying what is accepted (the loaders turn it
    back into a ScenarioError naming the field and the value)."""

    def check(value: object) -> float:
        try:
            return parse(value, kind)
        except ScenarioError as exc:
            raise ValueError(exc.expected) from None

    return BeforeValidator(check)
