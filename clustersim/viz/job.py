"""The job timeline picture: one row per job (e.g. per recovery policy), one bar per
segment of ``res.job`` — useful iterations, lost work, checkpoints, restarts, re-plans,
migrations — and a tick per fault, on a shared time axis."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

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
    """Draw job timelines (``{label: res.job}`` or one ``res.job``); returns the Figure."""
    if isinstance(jobs, pd.DataFrame):
        jobs = {"job": jobs}
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 0.9 + 0.6 * len(jobs)))
    seen = set()
    for y, job in enumerate(jobs.values()):
        for row in job.itertuples():
            key = "lost" if row.lost else row.kind
            if key in SEGMENT_COLORS and row.end_s > row.start_s:
                name, color = SEGMENT_COLORS[key]
                ax.barh(y, row.end_s - row.start_s, left=row.start_s, color=color, height=0.6,
                        label=None if key in seen else name)
                seen.add(key)
            elif row.kind in ("failure", "join", "reroute"):
                ax.plot([row.start_s] * 2, [y - 0.4, y + 0.4], color="black", lw=1.5)
    ax.set_yticks(range(len(jobs)), list(jobs))
    ax.invert_yaxis()
    ax.set_xlabel("job time (s)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=len(seen) or 1, frameon=False, fontsize=8)
    ax.set_title("job timeline (black ticks: faults)")
    return ax.figure
