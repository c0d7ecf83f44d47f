"""One colour per activity, shared by the Gantt, its legend and the Chrome trace."""

from __future__ import annotations

#: phase/kind → (legend label, matplotlib colour)
ACTIVITY_COLORS = {
    "F": ("forward", "#4C72B0"),
    "B": ("backward", "#55A868"),
    "W": ("weight grad", "#8C8C3C"),
    "O": ("optimizer", "#8172B2"),
    "send": ("send", "#DD8452"),
    "recv": ("recv", "#E5AE38"),
    "collective": ("collective", "#C44E52"),
    "link": ("link busy", "#937860"),
}


def activity(kind: str, phase: str) -> str:
    """The colour key of a span: its phase for compute, else its kind."""
    return phase if kind == "compute" and phase else kind
