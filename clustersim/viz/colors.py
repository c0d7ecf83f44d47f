"""One colour per activity, shared by the Gantt, its legend, the breakdown and the Chrome trace.

An *activity* is what a span was doing, derived from its ``kind``, ``phase`` and ``name``:
compute spans by phase (forward, backward, weight gradient, recompute, optimizer),
point-to-point spans by kind (send, recv), collectives by group and operation taken from
their name (``"dp all-reduce s0"`` → ``dp all-reduce``, ``"tp all_reduce"`` →
``tp all-reduce``), link busy periods as ``link``. Unknown activities get a colour from a
fixed palette chosen by a stable hash of their key, so the same key is always the same
colour in every picture and every process.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import pandas as pd

#: activity key → (legend label, matplotlib colour, Chrome ``cname`` for chrome://tracing)
ACTIVITY_COLORS: dict[str, tuple[str, str, str]] = {
    "F": ("forward", "#4C72B0", "thread_state_running"),
    "B": ("backward", "#55A868", "good"),
    "W": ("weight grad", "#8C8C3C", "olive"),
    "R": ("recompute", "#64B5CD", "rail_load"),
    "O": ("optimizer", "#8172B2", "rail_idle"),
    "send": ("send", "#DD8452", "thread_state_iowait"),
    "recv": ("recv", "#E5AE38", "yellow"),
    "dp all-reduce": ("dp all-reduce", "#C44E52", "terrible"),
    "dp reduce-scatter": ("dp reduce-scatter", "#A0304A", "bad"),
    "dp all-gather": ("dp all-gather", "#E0828A", "rail_response"),
    "tp all-reduce": ("tp all-reduce", "#DA8BC3", "rail_animation"),
    "tp all-gather": ("tp all-gather", "#B07AA1", "heap_dump_object_type"),
    "tp reduce-scatter": ("tp reduce-scatter", "#9D5C8B", "heap_dump_stack_frame"),
    "all-to-all": ("all-to-all", "#2A9D8F", "cq_build_running"),
    "collective": ("collective", "#D62728", "terrible"),
    "link": ("link busy", "#937860", "generic_work"),
}
_FALLBACK = ["#17BECF", "#BCBD22", "#7F7F7F", "#E377C2", "#8C564B", "#9467BD", "#FF7F0E", "#1F77B4"]
IDLE_COLOR = "#F2F2F2"
_OPS = {
    "allreduce": "all-reduce",
    "reducescatter": "reduce-scatter",
    "allgather": "all-gather",
    "alltoall": "all-to-all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "pushpull": "push-pull",
    "push": "push",
    "pull": "pull",
}


def collective_key(name: str) -> str:
    """The activity key of a collective from its span name: ``"dp all-reduce s0"`` →
    ``"dp all-reduce"``; ``"tp all_reduce"`` → ``"tp all-reduce"``; a name without a known
    operation → ``"collective"``."""
    words = re.split(r"\s+", name.strip())
    group, op = "", ""
    for w in words:
        norm = re.sub(r"[-_ ]", "", w.lower())
        if norm in _OPS and not op:
            op = _OPS[norm]
        elif not op and not group and re.fullmatch(r"[a-z]{1,4}", w.lower()):
            group = w.lower()
    if not op:
        return "collective"
    if op == "all-to-all":
        return op
    return f"{group} {op}".strip()


def activity(kind: str, phase: str, name: str = "") -> str:
    """The colour key of one span: its phase for compute, its collective kind for
    collectives, else its kind."""
    if kind == "compute":
        return phase or "F"
    if kind == "collective":
        return collective_key(name)
    return kind


def activities(spans: pd.DataFrame) -> np.ndarray:
    """:func:`activity` of every row of ``spans`` (vectorised over the unique triples)."""
    if spans.empty:
        return np.array([], dtype=object)
    # tab-separated: pandas' pyarrow-less string dtype drops NUL characters
    key = spans["kind"].astype(str) + "\t" + spans["phase"].astype(str) + "\t"
    coll = spans["kind"].to_numpy() == "collective"
    key = key.where(~coll, key + spans["name"].astype(str))
    codes, uniques = pd.factorize(key)
    mapped = np.array([activity(*(u.split("\t") + [""])[:3]) for u in uniques], dtype=object)
    return mapped[codes]


def color_of(act: str) -> str:
    """Matplotlib colour of an activity key (stable for unknown keys)."""
    if act in ACTIVITY_COLORS:
        return ACTIVITY_COLORS[act][1]
    return _FALLBACK[zlib.crc32(act.encode()) % len(_FALLBACK)]


#: how far communication bars are blended towards white: compute stays saturated, a
#: collective or transfer reads as secondary even where it is busy
COMM_LIGHTEN = 0.45


def lane_color(act: str, lane: str) -> tuple[float, float, float]:
    """RGB a Gantt draws ``act`` with on a row of ``lane``: :func:`color_of` on compute rows,
    blended :data:`COMM_LIGHTEN` of the way to white on every other row."""
    hexa = color_of(act)  # every colour here is '#RRGGBB' (no matplotlib: the trace writer imports this)
    rgb = np.array([int(hexa[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    if lane != "compute":
        rgb = rgb + (1.0 - rgb) * COMM_LIGHTEN
    return tuple(float(c) for c in rgb)


def label_of(act: str) -> str:
    """Legend label of an activity key."""
    return ACTIVITY_COLORS[act][0] if act in ACTIVITY_COLORS else act


def cname_of(act: str) -> str:
    """Chrome-trace reserved colour name of an activity (honoured by chrome://tracing;
    Perfetto colours slices by their name with digits stripped, so ``F3`` and ``F5`` match)."""
    return ACTIVITY_COLORS[act][2] if act in ACTIVITY_COLORS else "generic_work"


def legend_order(acts) -> list[str]:
    """Activities in the table's order, unknown ones after, alphabetically."""
    acts = set(acts)
    known = [a for a in ACTIVITY_COLORS if a in acts]
    return known + sorted(acts - set(known))
