"""Pictures that stay readable at 1,000+ GPUs: the aggregated Gantt and the busy heatmap.

Both reduce spans to time bins with :func:`~clustersim.viz.binning.bin_busy` and draw
one image (``imshow``), so their cost grows with the number of spans (numpy) and not
with the number of bars matplotlib has to draw.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch

from ..metrics import gpu_spans
from .binning import bin_busy, busy_fraction_over_time, default_window
from .colors import IDLE_COLOR, activities, label_of, lane_color, legend_order
from .layout import new_figure
from .rows import (
    COMM_ROW,
    COMPUTE_ROW,
    FRAME_IN,
    MAX_HEIGHT_IN,
    ROW_IN,
    busiest_links,
    device_info,
    gantt_height_in,
    gpu_types_differ,
    natural_key,
    row_height,
)


def _groups(info):
    """Group key per GPU: its stage when stages are known (per job in a multi-job run),
    else its node, else itself."""
    if "job" in info.columns:
        return info["job"] + ", stage " + info["stage"].astype(str), "job"
    if (info["stage"] >= 0).any():
        return info["stage"], "stage"
    if (info["node"] >= 0).any():
        return info["node"], "node"
    return info.index.to_series(), "device"


#: most row pairs the aggregated Gantt draws within the height cap; beyond, consecutive
#: groups share a row pair
MAX_PAIRS = int((MAX_HEIGHT_IN - FRAME_IN) / (ROW_IN * (COMPUTE_ROW + COMM_ROW)))


def _merge(keys: list, what: str) -> tuple[dict, list[str], int]:
    """Row pair of every group key and the pairs' names: one pair per group while at most
    :data:`MAX_PAIRS`, else ``per`` consecutive groups per pair ("stages 0–3")."""
    per = -(-len(keys) // MAX_PAIRS)
    pair = {k: i // per for i, k in enumerate(keys)}
    if per == 1:
        return pair, [f"{what} {k}" for k in keys], 1
    chunks = [keys[i : i + per] for i in range(0, len(keys), per)]
    return pair, [f"{what}s {c[0]}–{c[-1]}" if len(c) > 1 else f"{what} {c[0]}" for c in chunks], per


def plot_gantt_aggregate(spans, ax=None, window=None, title="", device_table=None, bins: int = 800):
    """One compute row and one (half as tall, lighter) communication row per stage (or
    node; consecutive ones share a pair beyond :data:`MAX_PAIRS`): each time bin takes the
    colour of the dominant activity of the group's GPUs, faded towards the idle grey by
    their mean busy fraction. Returns the Figure."""
    info = device_info(spans, device_table)
    group, what = _groups(info)
    pair_of, names, per = _merge(sorted(set(group), key=natural_key), what)
    pair = group.map(pair_of)
    n_pairs = len(names)
    size = np.bincount(pair.to_numpy(), minlength=n_pairs).astype(float)
    g = gpu_spans(spans)
    t0, t1 = default_window(g, window)
    acts_all = activities(g)
    order = legend_order(set(acts_all))
    comm = (g["lane"] != "compute").to_numpy()
    row = pair.reindex(g["device"]).to_numpy().astype(np.int64) * 2 + comm
    n_rows = 2 * n_pairs
    busy = np.zeros((len(order), n_rows, bins))
    for k, act in enumerate(order):
        sel = acts_all == act
        busy[k] = bin_busy(
            row[sel], g["start_s"].to_numpy()[sel], g["end_s"].to_numpy()[sel], n_rows, (t0, t1), bins
        )
    width = (t1 - t0) / bins
    frac = busy / (width * np.repeat(size, 2)[None, :, None])
    total = np.clip(frac.sum(axis=0), 0.0, 1.0)
    dominant = frac.argmax(axis=0)
    lanes = ["compute", "comm"] * n_pairs
    palette = np.array([[lane_color(a, lane) for a in order] or [to_rgb(IDLE_COLOR)] for lane in lanes])
    idle = np.array(to_rgb(IDLE_COLOR))
    strength = np.where(total > 0, 0.25 + 0.75 * total, 0.0)[..., None]
    img = idle * (1 - strength) + np.take_along_axis(palette, dominant[..., None], axis=1) * strength
    # image rows in COMM_ROW units: a compute row is repeated COMPUTE_ROW / COMM_ROW times
    repeats = [round(row_height(lane) / COMM_ROW) for lane in lanes]
    units = COMM_ROW * sum(repeats)
    if ax is None:
        fig = new_figure((12, max(2.5, gantt_height_in(units))))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    ax.imshow(
        np.repeat(img, repeats, axis=0), aspect="auto", interpolation="nearest", extent=(t0, t1, units, 0)
    )
    pair_top = np.arange(n_pairs) * (COMPUTE_ROW + COMM_ROW)
    for top in pair_top[1:]:
        ax.axhline(top, color="#888888", linewidth=0.6)
    typed = gpu_types_differ(info)
    labels = []
    for i, name in enumerate(names):
        n = int(size[i])
        kinds = "/".join(sorted(set(info.loc[pair == i, "gpu"]))) if typed else ""
        labels += [f"{name} ({n} GPU{'s' if n != 1 else ''}{', ' + kinds if kinds else ''})  compute", "comm"]
    ax.set_yticks(
        np.column_stack([pair_top + COMPUTE_ROW / 2, pair_top + COMPUTE_ROW + COMM_ROW / 2]).ravel()
    )
    ax.set_yticklabels(labels, fontsize=8)
    for tick in ax.get_yticklabels()[1::2]:
        tick.set_fontsize(6.5)
    ax.set_xlabel("time (s)")
    rows_are = f"one row pair per {what if per == 1 else f'{per} {what}s'}"
    ax.set_title(
        f"{title}: {rows_are}"
        if title
        else f"timeline, {rows_are} (colour: dominant activity; strength: mean busy fraction)",
        fontsize=10,
    )
    on_compute = set(acts_all[~comm])
    handles = [
        Patch(color=lane_color(a, "compute" if a in on_compute else "comm"), label=label_of(a)) for a in order
    ]
    handles.append(Patch(facecolor=IDLE_COLOR, edgecolor="#BBBBBB", label="idle"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def plot_heatmap(
    spans,
    ax=None,
    window=None,
    lane: str = "compute",
    device_table=None,
    bins: int = 400,
    links: bool = False,
    top_links: int = 64,
    title: str = "",
):
    """Busy fraction per GPU (one row each, ordered by stage then name) of ``lane`` — or,
    with ``links=True``, of the ``top_links`` busiest links — per time bin. Returns the
    Figure."""
    t0, t1 = default_window(spans, window)
    if links:
        keys = busiest_links(spans, top_links)
        sub = spans[spans["lane"] == "link"]
        ylabel, boundaries = f"links (top {len(keys)} by busy time)", []
    else:
        info = device_info(spans, device_table)
        keys = sorted(info.index, key=lambda d: (info.at[d, "stage"], natural_key(d)))
        info = info.loc[keys]
        sub = spans[spans["lane"] == lane]
        stages = info["stage"].to_numpy()
        boundaries = [(i, s) for i, s in enumerate(stages) if i == 0 or s != stages[i - 1]]
        ylabel = f"GPUs ({lane} lane)"
    frac = busy_fraction_over_time(sub, keys, sub["device"], (t0, t1), bins)
    if ax is None:
        fig = new_figure((12, min(9.0, max(3.0, 0.22 * len(keys) + 1.5))))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    im = ax.imshow(
        frac,
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
        vmin=0,
        vmax=1,
        extent=(t0, t1, len(keys) - 0.5, -0.5),
    )
    fig.colorbar(im, ax=ax, label="busy fraction", fraction=0.03, pad=0.01)
    if len(keys) <= 48:
        ax.set_yticks(range(len(keys)))
        ax.set_yticklabels(keys, fontsize=7)
    elif boundaries and len(boundaries) <= 64:
        step = max(1, len(boundaries) // 32)
        ends = [i for i, _ in boundaries[1:]] + [len(keys)]
        mids = [(i + e - 1) / 2 for (i, _), e in zip(boundaries, ends)]
        ax.set_yticks(mids[::step])
        ax.set_yticklabels([f"stage {s}" for _, s in boundaries[::step]], fontsize=7)
        for i, _ in boundaries[1:]:
            ax.axhline(i - 0.5, color="white", linewidth=0.4)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("time (s)")
    ax.set_title(title or f"busy fraction over time ({len(keys)} rows × {bins} bins)", fontsize=10)
    fig.tight_layout()
    return fig
