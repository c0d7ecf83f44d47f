"""The job timeline picture: one row per job (e.g. per recovery policy), one bar per
segment of ``res.job`` — useful iterations, lost work, checkpoints, restarts, re-plans,
migrations — and a tick per fault, on a shared time axis."""

from __future__ import annotations

import pandas as pd
from matplotlib.collections import LineCollection

from .layout import new_figure

#: segment → (legend label, colour); lost work is drawn by its ``lost`` flag, whatever its kind
SEGMENT_COLORS = {
    "iteration": ("useful iteration", "#55A868"),
    "lost": ("lost work", "#C44E52"),
    "checkpoint": ("checkpoint write", "#4C72B0"),
    "restart": ("restart + checkpoint read", "#DD8452"),
    "replan": ("re-plan", "#E5AE38"),
    "migration": ("state migration", "#8172B2"),
}


def plot_job(jobs: dict[str, pd.DataFrame] | pd.DataFrame, ax=None):
    """Draw job timelines (``{label: res.job}`` or one ``res.job``); returns the Figure.

    Each row's segments of one kind are one ``broken_barh`` collection and all fault ticks
    one line collection, so a long timeline costs a few artists, not one per segment."""
    if isinstance(jobs, pd.DataFrame):
        jobs = {"job": jobs}
    if ax is None:
        ax = new_figure((11, 0.9 + 0.6 * len(jobs))).add_subplot()
    seen, ticks = set(), []
    for y, job in enumerate(jobs.values()):
        key = job["kind"].where(~job["lost"].astype(bool), "lost")
        is_bar = key.isin(list(SEGMENT_COLORS)) & (job["end_s"] > job["start_s"])
        for k in dict.fromkeys(key[is_bar]):  # kinds in order of first appearance: the legend's order
            part = job[is_bar & (key == k)]
            name, color = SEGMENT_COLORS[k]
            spans = ax.broken_barh(
                list(zip(part["start_s"], part["end_s"] - part["start_s"], strict=True)),
                (y - 0.3, 0.6),
                facecolors=color,
                label=None if k in seen else name,
            )
            spans.sticky_edges.x.extend(part["start_s"])  # as barh does: no margin left of a bar's start
            seen.add(k)
        faults = job.loc[job["kind"].isin(["failure", "join", "reroute"]) & ~is_bar, "start_s"]
        ticks += [[(x, y - 0.4), (x, y + 0.4)] for x in faults]
    if ticks:
        ax.add_collection(LineCollection(ticks, colors="black", linewidths=1.5, capstyle="projecting"))
    ax.set_yticks(range(len(jobs)), list(jobs))
    ax.invert_yaxis()
    ax.set_xlabel("job time (s)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=len(seen) or 1, frameon=False, fontsize=8)
    ax.set_title("job timeline (black ticks: faults)")
    return ax.figure
