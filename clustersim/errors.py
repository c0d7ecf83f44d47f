"""Errors users see. Each names what went wrong in words a scenario author can act on."""

from __future__ import annotations

import reprlib

#: longest rendering of a bad value in a message; longer ones end in "…"
REPR_LIMIT = 120

_REPR = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_REPR.maxlevel, _REPR.maxstring, _REPR.maxlong, _REPR.maxother = 3, 80, 40, 80
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = 6


def short_repr(value: object, limit: int = REPR_LIMIT) -> str:
    """``repr(value)`` bounded in work and length: nested containers are cut after a few
    items and levels (a YAML alias bomb or a 6 GiB cell costs no more than a small value),
    and the text after ``limit`` characters."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a repr that raises (e.g. an int past Python's digit limit)
        text = f"<{type(value).__name__}>"
    return shorten(text, limit)


def shorten(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters (ending in "…" when cut), for messages that
    quote something from outside (a parser's complaint about a file)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ClusterSimError(Exception):
    """Base class of every error clustersim raises on purpose."""


class ScenarioError(ClusterSimError, ValueError):
    """A scenario (or a topology/preset inside it) is invalid.

    The message names the field path, the bad value and what would be accepted, e.g.
    ``parallel.schedule: 'gpip' is not a known schedule; known: 1f1b, gpipe``.
    """

    def __init__(self, field: str, value: object, expected: str):
        self.field, self.value, self.expected = field, value, expected
        super().__init__(f"{field}: {short_repr(value)} is invalid; {expected}")


class ScenarioWarning(UserWarning):
    """A scenario that is valid but probably not what its author meant (a bare number
    read in base units that is implausible for its quantity). The CLI prints it as one
    ``warning:`` line; in Python it is a regular :mod:`warnings` category."""

    def __init__(self, field: str, value: object, hint: str):
        self.field, self.value, self.hint = field, value, hint
        super().__init__(f"{field}: {short_repr(value)} {hint}")


class CalibrationTransfer(ScenarioWarning):
    """A catalog GPU without kernel measurements of its own is priced with the efficiencies
    of the nearest calibrated GPU, applied to its own datasheet peaks
    (:func:`clustersim.workload.calibration.calibrated_as`): valid, but its compute times
    are a transfer, not a fit."""


class ProgramError(ClusterSimError):
    """A Program (the IR) is malformed: missing dependency, cycle, unmatched send/recv."""


class SimulationStall(ClusterSimError):
    """The event queue emptied while ops were still waiting (a deadlock)."""


class OutputError(ClusterSimError):
    """clustersim refused to write a file: a symbolic link or a name outside the output
    folder (clustersim.output), or a damaged or foreign result bundle to read back."""
