"""Errors users see. Each names what went wrong in words a scenario author can act on."""

from __future__ import annotations


class ClusterSimError(Exception):
    """Base class of every error clustersim raises on purpose."""


class ScenarioError(ClusterSimError, ValueError):
    """A scenario (or a topology/preset inside it) is invalid.

    The message names the field path, the bad value and what would be accepted, e.g.
    ``parallel.schedule: 'gpip' is not a known schedule; known: 1f1b, gpipe``.
    """

    def __init__(self, field: str, value: object, expected: str):
        self.field, self.value, self.expected = field, value, expected
        super().__init__(f"{field}: {value!r} is invalid; {expected}")


class ProgramError(ClusterSimError):
    """A Program (the IR) is malformed: missing dependency, cycle, unmatched send/recv."""


class SimulationStall(ClusterSimError):
    """The event queue emptied while ops were still waiting (a deadlock)."""
