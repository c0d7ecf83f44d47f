"""The generation picture: batch size and KV-cache occupancy over time (``res.steps`` of a
run with a ``generation`` section, docs/generation.md), one step a stair."""

from __future__ import annotations

import pandas as pd

from .layout import new_figure


def plot_generation(steps: pd.DataFrame, fig=None):
    """Draw the sequences a step and the KV blocks in use (fraction of the cache) against
    time from ``res.steps``; returns the Figure."""
    fig = fig or new_figure((11, 4.2))
    top, bottom = fig.subplots(2, 1, sharex=True)
    t = list(steps["start_s"]) + [float(steps["end_s"].iloc[-1])]
    for ax, col, label in (
        (top, "seqs", "sequences a step"),
        (bottom, "kv_utilization", "KV cache in use"),
    ):
        values = list(steps[col]) + [steps[col].iloc[-1]]
        ax.step(t, values, where="post", lw=1.0)
        ax.set_ylabel(label)
    bottom.set_ylim(0, 1.02)
    bottom.set_xlabel("time (s)")
    return fig
