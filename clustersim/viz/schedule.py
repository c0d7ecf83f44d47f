"""The picture of a queue on one fabric (docs/scheduler.md): one row per GPU, a bar for
each stretch a job holds it, coloured by job, with the number of jobs sharing the fabric
written on each bar."""

from __future__ import annotations

import pandas as pd

from .layout import new_figure


def plot_schedule(timeline: pd.DataFrame, num_gpus: int, ax=None):
    """GPU rows against time from a Schedule's ``timeline`` (``job``, ``start_s``,
    ``end_s``, ``gpus``, ``sharing``); returns the Figure."""
    if ax is None:
        ax = new_figure((11, 1.5 + 0.22 * num_gpus)).add_subplot()
    colors = {job: f"C{i % 10}" for i, job in enumerate(dict.fromkeys(timeline["job"]))}  # matplotlib's cycle
    for row in timeline.itertuples():
        width = row.end_s - row.start_s
        for g in row.gpus:
            ax.broken_barh([(row.start_s, width)], (g - 0.4, 0.8), color=colors[row.job])
        mid = (min(row.gpus) + max(row.gpus)) / 2
        ax.text(
            row.start_s + width / 2, mid, f"{row.job} ×{row.sharing}", ha="center", va="center", fontsize=7
        )
    ax.set_ylim(num_gpus - 0.5, -0.5)
    ax.set_ylabel("GPU")
    ax.set_xlabel("time (s)")
    ax.set_title("which job holds which GPUs (×n: jobs running on the fabric)", fontsize=10)
    return ax.figure
