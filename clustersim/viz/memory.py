"""Memory over time per GPU, with each GPU's capacity as a dashed line.

Up to ``max_lines`` GPUs get one step line each; above that the plot shows the minimum,
median and maximum over GPUs at every sample time and the line of the GPU with the
highest peak — a 1,024-GPU run stays one readable picture.
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd

from .layout import new_figure
from .rows import natural_key

GIB = 2**30


def _final_per_time(memory: pd.DataFrame) -> pd.DataFrame:
    """Allocated bytes per (time, device) as a wide table, forward-filled; several samples
    at one time keep the last (the state after that instant's changes)."""
    wide = memory.pivot_table(index="time_s", columns="device", values="allocated_bytes", aggfunc="last")
    return wide.sort_index().ffill().fillna(0.0)


def plot_memory(
    memory: pd.DataFrame,
    device_table: pd.DataFrame | None = None,
    ax=None,
    window=None,
    max_lines: int = 16,
    end_s: float | None = None,
):
    """Step plot of allocated GiB per GPU over time plus capacity lines; returns the Figure.

    ``end_s`` extends the last level to the end of the run (default: the last sample)."""
    if ax is None:
        fig = new_figure((11, 3.8))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    if memory.empty:
        ax.text(0.5, 0.5, "no memory samples", ha="center", va="center", transform=ax.transAxes)
        return fig
    wide = _final_per_time(memory)
    wide = wide[sorted(wide.columns, key=natural_key)]
    end = max(float(end_s or 0.0), float(wide.index.max()))
    if end > wide.index.max():
        wide.loc[end] = wide.iloc[-1]
    t = wide.index.to_numpy()
    gib = wide.to_numpy() / GIB
    if wide.shape[1] <= max_lines:
        cmap = matplotlib.colormaps["tab10" if wide.shape[1] <= 10 else "tab20"]
        for i, dev in enumerate(wide.columns):
            ax.step(t, gib[:, i], where="post", color=cmap(i % cmap.N), linewidth=1.3, label=dev)
    else:
        ax.fill_between(
            t,
            gib.min(axis=1),
            gib.max(axis=1),
            step="post",
            color="#4C72B0",
            alpha=0.25,
            label=f"min–max over {wide.shape[1]} GPUs",
        )
        ax.step(t, np.median(gib, axis=1), where="post", color="#4C72B0", linewidth=1.2, label="median")
        top = int(np.argmax(gib.max(axis=0)))
        ax.step(
            t, gib[:, top], where="post", color="#C44E52", linewidth=1.0, label=f"{wide.columns[top]} (peak)"
        )
    _capacity_lines(ax, device_table, list(wide.columns))
    if window is not None:
        ax.set_xlim(*window)
    else:
        ax.set_xlim(float(t[0]), end)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("allocated (GiB)")
    ax.set_title("memory per GPU (dashed: capacity)", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def _capacity_lines(ax, devices, names) -> None:
    """Dashed capacity line(s); shown only when within 4× of the peak, else noted in text
    so the allocations stay visible."""
    if devices is None or "memory_capacity_bytes" not in devices.columns:
        return
    caps = devices.set_index("device")["memory_capacity_bytes"].reindex(names).dropna()
    if caps.empty:
        return
    peak = ax.get_ylim()[1]
    for cap in sorted(set(caps / GIB)):
        if cap <= 4 * peak:
            ax.axhline(cap, color="#C44E52", linestyle="--", linewidth=1.0)
            ax.annotate(
                f"capacity {cap:.4g} GiB",
                (1.0, cap),
                xycoords=("axes fraction", "data"),
                ha="right",
                va="bottom",
                fontsize=7,
                color="#C44E52",
            )
        else:
            ax.text(
                0.99,
                0.03,
                f"capacity {cap:.4g} GiB (off scale)",
                transform=ax.transAxes,
                ha="right",
                va="bottom",
                fontsize=8,
                color="#C44E52",
            )
