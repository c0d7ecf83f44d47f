"""The picture of a queue on one fabric (docs/scheduler.md): one row per GPU, a bar for
each stretch a job holds it, coloured by job, with the number of jobs running written on
each bar; below, one row per link that two jobs hold at once, a band per job holding it."""

from __future__ import annotations

import pandas as pd

from .layout import new_figure


def shared_links(timeline: pd.DataFrame) -> list[str]:
    """The links that stretches of two different jobs hold at the same time, sorted."""
    rows = list(timeline.itertuples())
    out: set[str] = set()
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if a.job != b.job and a.start_s < b.end_s and b.start_s < a.end_s:
                out.update(set(a.links) & set(b.links))
    return sorted(out)


def plot_schedule(timeline: pd.DataFrame, num_gpus: int):
    """GPU rows (and shared-link rows) against time from a Schedule's ``timeline``
    (``job``, ``start_s``, ``end_s``, ``gpus``, ``links``, ``sharing``); returns the Figure."""
    links = shared_links(timeline)
    fig = new_figure((11, 1.5 + 0.22 * (num_gpus + len(links))))
    if links:
        ax, ax_links = fig.subplots(2, 1, sharex=True, height_ratios=[num_gpus, len(links)])
    else:
        ax, ax_links = fig.add_subplot(), None
    jobs = list(dict.fromkeys(timeline["job"]))
    colors = {job: f"C{i % 10}" for i, job in enumerate(jobs)}  # matplotlib's colour cycle
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
    ax.set_title("which job holds which GPUs (×n: jobs running) and which shared links", fontsize=10)
    if ax_links is not None:
        band = 0.8 / len(jobs)  # each job its own band in a link's row, so overlaps show
        for row in timeline.itertuples():
            for k, link in enumerate(links):
                if link in row.links:
                    top = k - 0.4 + jobs.index(row.job) * band
                    ax_links.broken_barh(
                        [(row.start_s, row.end_s - row.start_s)], (top, band), color=colors[row.job]
                    )
        ax_links.set_yticks(range(len(links)), links, fontsize=6)
        ax_links.set_ylim(len(links) - 0.5, -0.5)
    (ax_links or ax).set_xlabel("time (s)")
    return fig
