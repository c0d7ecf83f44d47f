"""The generation picture: batch size and KV-cache occupancy over time (``res.steps`` of a
run with a ``generation`` section, docs/generation.md), one step a stair."""

from __future__ import annotations

import pandas as pd

from .layout import new_figure


def plot_generation(steps: pd.DataFrame, fig=None):
    """Draw the sequences a step and the KV blocks in use (fraction of the cache) against
    time from ``res.steps``, one stair per pool (``steps.pool``: each replica, or the prefill
    and decode pools) where there are several; returns the Figure."""
    fig = fig or new_figure((11, 4.2))
    top, bottom = fig.subplots(2, 1, sharex=True)
    pools = list(dict.fromkeys(steps["pool"])) if "pool" in steps else [None]
    for pool in pools:
        mine = steps if pool is None else steps[steps["pool"] == pool]
        t = list(mine["start_s"]) + [float(mine["end_s"].iloc[-1])]
        for ax, col in ((top, "seqs"), (bottom, "kv_utilization")):
            values = list(mine[col]) + [mine[col].iloc[-1]]
            ax.step(t, values, where="post", lw=1.0, label=pool)
    top.set_ylabel("sequences a step")
    bottom.set_ylabel("KV cache in use")
    if len(pools) > 1:
        top.legend(loc="upper right", fontsize="small")
    bottom.set_ylim(0, 1.02)
    bottom.set_xlabel("time (s)")
    return fig
