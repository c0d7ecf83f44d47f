"""Gantt timeline of a Result's spans: one row per GPU lane (and optionally per link)."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .colors import ACTIVITY_COLORS, activity  # noqa: E402

_LANE_ORDER = {"compute": 0, "comm": 1, "send": 2, "recv": 3}


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def plot_gantt(spans, ax=None, devices=None, window=None, links=False, title=""):
    """Draw ``spans`` as a Gantt chart and return the Figure.

    ``devices`` limits the rows to those GPUs (names or indices); ``window`` = (t0, t1)
    in seconds zooms in; ``links`` adds a row per busy link. Bars are coloured by phase
    (forward, backward, optimizer) or kind (send, recv, collective) and labelled with
    the micro-batch number where they are wide enough.
    """
    df = spans if links else spans[spans["lane"] != "link"]
    if devices is not None:
        names = {f"gpu{d}" if isinstance(d, int) else d for d in devices}
        df = df[df["device"].isin(names) | (df["lane"] == "link")]
    if window is not None:
        df = df[(df["end_s"] > window[0]) & (df["start_s"] < window[1])]
    rows = sorted({(d, lane) for d, lane in zip(df["device"], df["lane"])},
                  key=lambda r: (r[1] == "link", _natural(r[0]), _LANE_ORDER.get(r[1], 9)))
    index = {r: i for i, r in enumerate(rows)}
    if ax is None:
        fig, ax = plt.subplots(figsize=(12, max(2.0, 0.32 * len(rows) + 1.2)))
    else:
        fig = ax.figure
    t_end = float(df["end_s"].max()) if len(df) else 1.0
    used = set()
    for key, grp in df.groupby([df["kind"], df["phase"]], sort=False):
        act = activity(*key)
        label, color = ACTIVITY_COLORS.get(act, (act, "#999999"))
        used.add(act)
        for y_key, g in grp.groupby([grp["device"], grp["lane"]], sort=False):
            bars = list(zip(g["start_s"], g["end_s"] - g["start_s"]))
            ax.broken_barh(bars, (index[y_key] - 0.4, 0.8), facecolors=color, edgecolors="white", linewidth=0.3)
    # micro-batch numbers on compute bars that are wide enough to hold them
    comp = df[(df["lane"] == "compute") & (df["microbatch"] >= 0)]
    if len(comp) <= 2000:
        min_w = 0.012 * (window[1] - window[0] if window else t_end)
        for s, e, mb, d, lane in zip(comp["start_s"], comp["end_s"], comp["microbatch"], comp["device"], comp["lane"]):
            if e - s >= min_w:
                ax.text((s + e) / 2, index[(d, lane)], str(mb), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{d} {lane}" for d, lane in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    if window is not None:
        ax.set_xlim(*window)
    ax.set_title(title or "timeline")
    handles = [Patch(color=ACTIVITY_COLORS[a][1], label=ACTIVITY_COLORS[a][0]) for a in ACTIVITY_COLORS if a in used]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
