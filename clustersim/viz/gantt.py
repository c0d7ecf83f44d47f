"""Gantt timeline of a Result's spans.

Up to :data:`~clustersim.viz.layout.AGGREGATE_ABOVE` GPUs (or whenever ``devices`` picks
a subset), one row per GPU lane — compute, tp, comm, send, recv — and optionally one per
link; bars coloured by activity (see :mod:`clustersim.viz.colors`) on a light grey row so
idle time shows; micro-batch numbers on bars wide enough to hold them. Larger clusters
get :func:`~clustersim.viz.aggregate.plot_gantt_aggregate`: one row per stage (or node)
whose colour is the dominant activity of that group's GPUs in each time bin and whose
strength is their mean busy fraction.
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch

from .colors import IDLE_COLOR, activities, color_of, label_of, legend_order
from .layout import new_figure
from .rows import AGGREGATE_ABOVE, busiest_links, device_info, device_names, lane_rows, num_gpus

MAX_LABELS = 3000


def plot_gantt(
    spans,
    ax=None,
    devices=None,
    window=None,
    links=False,
    title="",
    device_table=None,
    aggregate: bool | None = None,
    max_links: int = 16,
):
    """Draw ``spans`` as a Gantt chart and return the Figure.

    ``devices`` limits the rows to those GPUs (names or indices); ``window`` = (t0, t1) in
    seconds zooms in; ``links=True`` adds a row for each of the ``max_links`` busiest links.
    ``aggregate`` forces (True) or forbids (False) one row per stage; by default it is on
    above ``AGGREGATE_ABOVE`` GPUs when no subset is chosen. ``device_table`` (the Result's
    ``devices``) supplies stage and node labels.
    """
    names = device_names(devices)
    n_gpus = num_gpus(spans)
    if aggregate is None:
        aggregate = names is None and n_gpus > AGGREGATE_ABOVE
    if aggregate:
        from .aggregate import plot_gantt_aggregate

        return plot_gantt_aggregate(spans, ax=ax, window=window, title=title, device_table=device_table)
    df = spans
    if names is not None:
        df = df[df["device"].isin(names) | (df["lane"] == "link")]
    if window is not None:
        df = df[(df["end_s"] >= window[0]) & (df["start_s"] <= window[1])]
    rows = lane_rows(df)
    if links:
        rows += [(link, "link") for link in busiest_links(df, max_links)]
    df = df[df["device"].isin({d for d, _ in rows})]
    index = {r: i for i, r in enumerate(rows)}
    if ax is None:
        fig = new_figure((12, max(2.2, 0.3 * len(rows) + 1.3)))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    t0, t1 = window if window is not None else (0.0, float(df["end_s"].max()) if len(df) else 1.0)
    if t1 <= t0:
        t1 = t0 + 1e-9
    # light row backgrounds: gaps between bars are idle time
    ax.broken_barh([(t0, t1 - t0)], (-0.5, len(rows)), facecolors="white")
    for i in range(len(rows)):
        ax.broken_barh([(t0, t1 - t0)], (i - 0.4, 0.8), facecolors=IDLE_COLOR, linewidth=0)
    acts = activities(df)
    row_idx = (
        np.array([index[r] for r in zip(df["device"], df["lane"])], dtype=int)
        if len(df)
        else np.array([], int)
    )
    # zero-length and sub-pixel spans (an instant recv) still show as a 3-pixel mark
    min_w = 3.0 * (t1 - t0) / max(ax.get_window_extent().width, 1.0)
    starts, widths = df["start_s"].to_numpy(), np.maximum((df["end_s"] - df["start_s"]).to_numpy(), min_w)
    for act in legend_order(set(acts)):
        sel = acts == act
        for i in np.unique(row_idx[sel]):
            m = sel & (row_idx == i)
            ax.broken_barh(
                list(zip(starts[m], widths[m])),
                (i - 0.4, 0.8),
                facecolors=color_of(act),
                edgecolors="white",
                linewidth=0.3,
            )
    _label_microbatches(ax, fig, df, row_idx, (t0, t1))
    _axes_labels(ax, rows, device_info(spans, device_table))
    ax.set_xlim(t0, t1)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("time (s)")
    ax.set_title(title or "timeline")
    handles = [Patch(color=color_of(a), label=label_of(a)) for a in legend_order(set(acts))]
    handles.append(Patch(facecolor=IDLE_COLOR, edgecolor="#BBBBBB", label="idle"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _label_microbatches(ax, fig, df, row_idx, window) -> None:
    """Micro-batch numbers (white) on compute/tp bars wide enough for the text."""
    t0, t1 = window
    lanes = df["lane"].to_numpy()
    mb = df["microbatch"].to_numpy()
    sel = ((lanes == "compute") | (lanes == "tp")) & (mb >= 0)
    if sel.sum() > MAX_LABELS:
        return
    # before tight_layout the axes is a little wider than in the end: keep a margin
    width_px = 0.9 * (ax.get_window_extent().width or fig.get_figwidth() * fig.dpi * 0.75)
    s_per_px = (t1 - t0) / max(width_px, 1.0)
    s, e = df["start_s"].to_numpy()[sel], df["end_s"].to_numpy()[sel]
    for a, b, j, i in zip(s, e, mb[sel], row_idx[sel]):
        text = str(int(j))
        lo, hi = max(a, t0), min(b, t1)
        if (hi - lo) / s_per_px >= 6.0 * len(text) + 4:
            ax.text((lo + hi) / 2, i, text, ha="center", va="center", fontsize=7, color="white", clip_on=True)


def _axes_labels(ax, rows, info) -> None:
    """Lane names on the y axis, the device (with stage/node) on its first row, and a thin
    line between devices."""
    labels, prev = [], None
    for i, (dev, lane) in enumerate(rows):
        if dev != prev and lane != "link":
            tag = dev
            if dev in info.index and info.at[dev, "stage"] >= 0:
                tag += f" s{info.at[dev, 'stage']}"
            if dev in info.index and info.at[dev, "node"] >= 0:
                tag += f" n{info.at[dev, 'node']}"
            labels.append(f"{tag}  {lane}")
            if i:
                ax.axhline(i - 0.5, color="#888888", linewidth=0.6)
        elif lane == "link":
            labels.append(dev)
            if prev is not None and rows[i - 1][1] != "link":
                ax.axhline(i - 0.5, color="#444444", linewidth=1.0)
        else:
            labels.append(lane)
        prev = dev
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
