"""Gantt timeline of a Result's spans.

While one row per GPU lane fits under the height cap
(:func:`~clustersim.viz.rows.per_lane_fits`, or whenever ``devices`` picks a subset): one
row per GPU lane — compute, tp, comm, send, recv — and optionally one per link; bars
coloured by activity (see :mod:`clustersim.viz.colors`) on a light grey row so idle time
shows; micro-batch numbers on bars wide enough to hold them. Compute rows are twice as
tall as communication rows and saturated; communication bars are lighter. Bars are drawn
at their true width, without edges or a minimum width: on communication rows a span
narrower than a pixel shades that pixel by the share it covers (anti-aliasing, no pixel
snapping), so a lane busy 2 % of the time shows about 2 % ink however many short spans it
has; compute bars snap to pixel edges so abutting ones show no seam. Larger
clusters get :func:`~clustersim.viz.aggregate.plot_gantt_aggregate`: one row pair per
stage (or node).
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch

from .colors import IDLE_COLOR, activities, label_of, lane_color, legend_order
from .layout import new_figure
from .rows import (
    FRAME_IN,
    MAX_HEIGHT_IN,
    ROW_IN,
    busiest_links,
    device_info,
    device_names,
    gantt_height_in,
    gpu_types_differ,
    lane_rows,
    per_lane_fits,
    row_height,
)

MAX_LABELS = 3000
#: the share of its row a bar fills (the rest is the gap between rows)
BAR_FILL = 0.84


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
    ``aggregate`` forces (True) or forbids (False) one row pair per stage; by default it is
    on when no subset is chosen and one row per GPU lane would not fit in
    :data:`~clustersim.viz.rows.MAX_HEIGHT_IN`. ``device_table`` (the Result's ``devices``)
    supplies stage, node and GPU-type labels. Rows that do not fit the cap (a large chosen
    subset, many links) get thinner, the figure no taller.
    """
    names = device_names(devices)
    if aggregate is None:
        aggregate = names is None and not per_lane_fits(spans)
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
    heights = np.array([row_height(lane) for _, lane in rows])
    tops = np.concatenate([[0.0], np.cumsum(heights)])[:-1]
    units = float(heights.sum())
    if ax is None:
        fig = new_figure((12, max(2.2, gantt_height_in(units))))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    t0, t1 = window if window is not None else (0.0, float(df["end_s"].max()) if len(df) else 1.0)
    if t1 <= t0:
        t1 = t0 + 1e-9
    # light row backgrounds: gaps between bars are idle time
    ax.broken_barh([(t0, t1 - t0)], (0.0, max(units, 1e-9)), facecolors="white")
    for top, h in zip(tops, heights):
        ax.broken_barh([(t0, t1 - t0)], _bar_band(top, h), facecolors=IDLE_COLOR, linewidth=0)
    acts = activities(df)
    row_idx = (
        np.array([index[r] for r in zip(df["device"], df["lane"])], dtype=int)
        if len(df)
        else np.array([], int)
    )
    starts, widths = df["start_s"].to_numpy(), (df["end_s"] - df["start_s"]).to_numpy()
    for act in legend_order(set(acts)):
        sel = acts == act
        for i in np.unique(row_idx[sel]):
            m = sel & (row_idx == i)
            ax.broken_barh(
                list(zip(starts[m], widths[m])),
                _bar_band(tops[i], heights[i]),
                facecolors=[lane_color(act, rows[i][1])],
                linewidth=0,
                # compute bars abut: snapped to pixel edges they leave no anti-aliased seam;
                # sparse communication bars unsnapped, so a sub-pixel one is a faint pixel
                snap=None if rows[i][1] == "compute" else False,
            )
    scale = min(1.0, (MAX_HEIGHT_IN - FRAME_IN) / max(ROW_IN * units, 1e-9))  # thinner rows, smaller text
    centres = tops + heights / 2
    _label_microbatches(ax, fig, df, row_idx, centres, (t0, t1), scale)
    _axes_labels(ax, rows, centres, tops, device_info(spans, device_table), scale)
    ax.set_xlim(t0, t1)
    ax.set_ylim(max(units, 1e-9), 0.0)
    ax.set_xlabel("time (s)")
    ax.set_title(title or "timeline")
    on_compute = set(acts[df["lane"].to_numpy() == "compute"]) if len(df) else set()
    handles = [
        Patch(color=lane_color(a, "compute" if a in on_compute else "comm"), label=label_of(a))
        for a in legend_order(set(acts))
    ]
    handles.append(Patch(facecolor=IDLE_COLOR, edgecolor="#BBBBBB", label="idle"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _bar_band(top: float, height: float) -> tuple[float, float]:
    """(bottom, height) of the bars of a row starting at ``top``: centred, :data:`BAR_FILL` of it."""
    return (top + height * (1 - BAR_FILL) / 2, height * BAR_FILL)


def _label_microbatches(ax, fig, df, row_idx, centres, window, scale) -> None:
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
    for a, b, j, i, lane in zip(s, e, mb[sel], row_idx[sel], lanes[sel]):
        text = str(int(j))
        lo, hi = max(a, t0), min(b, t1)
        if (hi - lo) / s_per_px >= 6.0 * len(text) + 4:
            ax.text(
                (lo + hi) / 2,
                centres[i],
                text,
                ha="center",
                va="center",
                fontsize=(7 if lane == "compute" else 6) * scale,
                color="white",
                clip_on=True,
            )


def _axes_labels(ax, rows, centres, tops, info, scale) -> None:
    """Lane names on the y axis, the device (with stage, node and — when the cluster mixes
    GPU types — its type) on its first row, and a thin line between devices."""
    labels, prev = [], None
    typed = gpu_types_differ(info)
    for i, (dev, lane) in enumerate(rows):
        if dev != prev and lane != "link":
            tag = dev
            if "job" in info.columns and dev in info.index:
                tag += f" {info.at[dev, 'job']}"
            if dev in info.index and info.at[dev, "stage"] >= 0:
                tag += f" s{info.at[dev, 'stage']}"
            if dev in info.index and info.at[dev, "node"] >= 0:
                tag += f" n{info.at[dev, 'node']}"
            if typed and dev in info.index:
                tag += f" {info.at[dev, 'gpu']}"
            labels.append(f"{tag}  {lane}")
            if i:
                ax.axhline(tops[i], color="#888888", linewidth=0.6)
        elif lane == "link":
            labels.append(dev)
            if prev is not None and rows[i - 1][1] != "link":
                ax.axhline(tops[i], color="#444444", linewidth=1.0)
        else:
            labels.append(lane)
        prev = dev
    ax.set_yticks(centres)
    ax.set_yticklabels(labels, fontsize=8 * scale)
    for tick, (_, lane) in zip(ax.get_yticklabels(), rows):
        if lane != "compute":
            tick.set_fontsize(6.5 * scale)
