"""``model.profile`` read row by row, and every row held to match an op the model prices.

A profile table (``op,phase,m,n,k,time_us``, docs/models.md) replaces modelled kernel
times by measured ones through :meth:`.cost_model.ProfileTable.lookup`; a row that matches
no lookup — a typo'd op name, a phase other than F, B or W, a shape no GEMM of the op has —
changes nothing, so a run with it would be identical to one without it and say nothing.
:func:`read_profile` refuses malformed rows as it reads them (naming the line and the
column), and :class:`CheckedProfile` records which rows the cost model looked up, so that
once a model's costs are priced, :meth:`CheckedProfile.check_all_used` refuses the rows
that matched nothing (docs/limits.md).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ScenarioError, short_repr
from ..reader import read_text
from .cost_model import ProfileTable

FIELD = "model.profile"
PHASES = ("F", "B", "W")
#: largest GEMM dimension a row may give (2^31 − 1: past any real tensor's side)
MAX_DIM = 2**31 - 1
#: longest measured kernel, in µs (10^12 µs: 11.6 days)
MAX_TIME_US = 1e12


@dataclass
class CheckedProfile(ProfileTable):
    """A ProfileTable that knows each row's line and which rows a lookup has matched."""

    path: str = ""
    lines: dict[tuple, int] = field(default_factory=dict)
    used: set[tuple] = field(default_factory=set)

    def lookup(self, op: str, phase: str, gemm: tuple | None) -> float | None:
        """As :meth:`ProfileTable.lookup`, noting the row that answered."""
        for key in ((op, phase, tuple(gemm) if gemm else None), (op, phase, None)):
            if key in self.times:
                self.used.add(key)
                return self.times[key]
        return None

    def check_all_used(self, priced: str) -> None:
        """Refuse the first row (by line) no lookup matched; ``priced`` names what was priced."""
        unused = sorted((self.lines[k], k) for k in self.times if k not in self.used)
        if unused:
            line, (op, phase, shape) = unused[0]
            at = f" at m,n,k = {','.join(map(str, shape))}" if shape else ""
            raise ScenarioError(
                FIELD,
                self.path,
                f"line {line}: op {op!r}, phase {phase}{at} matches no kernel of {priced}, so it "
                "would change nothing; accepted: an op name and phase the model prices (its layer "
                "ops: docs/models.md) and, with m,n,k, one of that op's GEMM shapes",
            )


def read_profile(path: str | Path) -> CheckedProfile:
    """The profile table of CSV file ``path``, each row checked: an op name, a phase of
    :data:`PHASES`, m,n,k all blank or whole numbers 1 … :data:`MAX_DIM`, a time_us from 0
    to :data:`MAX_TIME_US`, and no (op, phase, shape) given twice."""
    reader = csv.DictReader(io.StringIO(read_text(path, FIELD)))
    table = CheckedProfile(path=str(path))
    missing = [c for c in ("op", "phase", "time_us") if c not in (reader.fieldnames or ())]
    if missing:
        raise ScenarioError(
            FIELD, str(path), f"line 1: columns {missing} missing; expected op,phase,m,n,k,time_us"
        )
    try:
        for row in reader:
            line = reader.line_num

            def fail(column: str, expected: str, line=line, row=row):
                raise ScenarioError(
                    FIELD,
                    str(path),
                    f"line {line}, column {column}: {short_repr(row.get(column))} is invalid; {expected}",
                )

            if not row["op"]:
                fail("op", "accepted: the name of one of the model's ops (qkv, fc1, …)")
            if row["phase"] not in PHASES:
                fail("phase", f"accepted: {', '.join(PHASES)} (forward, input gradient, weight gradient)")
            dims = [row.get(c) or "" for c in "mnk"]
            if any(dims) and not all(_dim(d) for d in dims):
                column = next(c for c, d in zip("mnk", dims) if not _dim(d))
                fail(column, f"accepted: m, n and k all whole numbers from 1 to {MAX_DIM:,}, or all blank")
            time_us = _float(row["time_us"])
            if not 0 <= time_us <= MAX_TIME_US:
                fail("time_us", f"accepted: a time in µs from 0 to {MAX_TIME_US:.0e}")
            key = (row["op"], row["phase"], tuple(map(int, dims)) if any(dims) else None)
            if key in table.times:
                fail("op", f"the same op, phase and shape are on line {table.lines[key]}; give each once")
            table.times[key], table.lines[key] = time_us * 1e-6, line
    except csv.Error as exc:
        raise ScenarioError(FIELD, str(path), f"line {reader.line_num}: not CSV ({exc})") from None
    return table


def _dim(text: str) -> bool:
    """Whether ``text`` is a GEMM dimension (checked by its digits before int() reads it)."""
    text = text.strip()
    return text.isascii() and text.isdigit() and len(text) <= len(str(MAX_DIM)) and 1 <= int(text) <= MAX_DIM


def _float(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan
