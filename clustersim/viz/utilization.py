"""Utilization over time: GPU compute lanes and the busiest links, binned.

The top panel shows each GPU's compute-lane busy fraction per time bin (one line per
GPU up to ``max_lines``, else one per stage, the mean over its GPUs; drawn as an image,
one row each, when there are still more than ``max_lines``); the bottom panel
the ``top_links`` busiest links; the right panel their busy fraction over the whole
window as bars. Large clusters are better seen with
:func:`~clustersim.viz.aggregate.plot_heatmap`.
"""

from __future__ import annotations

import matplotlib
import numpy as np

from .binning import busy_fraction_over_time, default_window
from .layout import new_figure
from .rows import busiest_links, device_info, natural_key


def _compute_lines(spans, info, window, bins, max_lines):
    comp = spans[spans["lane"] == "compute"]
    if len(info) <= max_lines:
        keys = list(info.index)
        return keys, busy_fraction_over_time(comp, keys, comp["device"], window, bins)
    stage = info["stage"]
    keys = sorted(set(stage), key=natural_key)
    # a folded run simulates some GPUs of a stage (its twins have no spans): the mean is
    # over those, as the device table's busy_fraction copies theirs to the twins
    simulated = stage[stage.index.isin(set(comp["device"]))]
    size = np.array([max(1, (simulated == k).sum()) for k in keys], dtype=float)
    total = [(stage == k).sum() for k in keys]
    frac = busy_fraction_over_time(comp, keys, comp["device"].map(stage), window, bins, size)
    names = [
        f"stage {k} (mean of {int(n)})" if n == t else f"stage {k} (mean of {int(n)} simulated of {t})"
        for k, n, t in zip(keys, size, total)
    ]
    return names, frac


def plot_utilization(
    spans, ax=None, window=None, device_table=None, bins: int = 60, top_links: int = 8, max_lines: int = 8
):
    """Busy fraction over time of GPU compute lanes and of the busiest links; returns the
    Figure. With ``ax`` given, only the GPU panel is drawn on it."""
    t0, t1 = default_window(spans, window)
    centers = t0 + (np.arange(bins) + 0.5) * (t1 - t0) / bins
    info = device_info(spans, device_table)
    names, frac = _compute_lines(spans, info, (t0, t1), bins, max_lines)
    links = busiest_links(spans[(spans["end_s"] > t0) & (spans["start_s"] < t1)], top_links)
    if ax is not None:
        fig, ax_gpu, ax_link, ax_bar = ax.figure, ax, None, None
    elif links:
        fig = new_figure((13, 6.5))
        grid = fig.add_gridspec(2, 2, width_ratios=(3, 1.3))
        ax_gpu, ax_link, ax_bar = (
            fig.add_subplot(grid[0, 0]),
            fig.add_subplot(grid[1, 0]),
            fig.add_subplot(grid[:, 1]),
        )
        ax_link.sharex(ax_gpu)
    else:
        fig = new_figure((11, 3.6))
        ax_gpu = fig.add_subplot()
        ax_link = ax_bar = None
    ax_gpu.set_title(f"GPU compute utilization ({bins} bins of {(t1 - t0) / bins * 1e3:.3g} ms)", fontsize=10)
    if len(names) > max_lines:  # too many lines to tell apart: one image row each
        im = ax_gpu.imshow(
            frac,
            aspect="auto",
            interpolation="nearest",
            cmap="viridis",
            vmin=0,
            vmax=1,
            extent=(t0, t1, len(names) - 0.5, -0.5),
        )
        step = max(1, len(names) // 24)
        ax_gpu.set_yticks(range(0, len(names), step))
        ax_gpu.set_yticklabels(names[::step], fontsize=7)
        fig.colorbar(im, ax=ax_gpu, label="compute busy", fraction=0.03, pad=0.01)
    else:
        cmap = matplotlib.colormaps["tab10"]
        for i, (name, row) in enumerate(zip(names, frac)):
            ax_gpu.step(centers, row, where="mid", color=cmap(i % cmap.N), linewidth=1.2, label=name)
        ax_gpu.set_ylim(-0.02, 1.05)
        ax_gpu.set_ylabel("compute busy")
        ax_gpu.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    ax_gpu.set_xlim(t0, t1)
    if ax_link is not None:
        sub = spans[spans["lane"] == "link"]
        lf = busy_fraction_over_time(sub, links, sub["device"], (t0, t1), bins)
        lcmap = matplotlib.colormaps["Dark2"]
        for i, (name, row) in enumerate(zip(links, lf)):
            ax_link.step(centers, row, where="mid", color=lcmap(i % lcmap.N), linewidth=1.1, label=name)
        ax_link.set_ylim(-0.02, 1.05)
        ax_link.set_ylabel("link busy")
        ax_link.set_xlabel("time (s)")
        ax_link.set_title(f"top {len(links)} links over time", fontsize=10)
        ax_link.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
        ax_gpu.tick_params(labelbottom=False)
        _link_bars(ax_bar, sub, links, (t0, t1))
    else:
        ax_gpu.set_xlabel("time (s)")
    fig.tight_layout()
    return fig


def _link_bars(ax, link_spans, links, window) -> None:
    """Horizontal bars: busy fraction of each link over the whole window."""
    busy = busy_fraction_over_time(link_spans, links, link_spans["device"], window, 1)[:, 0]
    ax.barh(range(len(links)), busy, color="#937860")
    ax.set_yticks(range(len(links)))
    ax.set_yticklabels(links, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("busy fraction over the window")
    ax.set_title("busiest links", fontsize=10)
