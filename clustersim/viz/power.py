"""Power over time (docs/energy.md): each GPU's power (one line per GPU up to
``max_lines``, else one per stage, the mean over its GPUs) with the TDP dashed, and the
cluster's GPU total below — the utilization picture's layout, in watts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .layout import new_figure


def plot_power(
    power: pd.DataFrame, devices: pd.DataFrame, tdp_w: dict[str, float], max_lines: int = 8, ax=None
):
    """Draw ``power`` (columns ``time_s``, ``device``, ``watts``: binned means, e.g.
    ``res.power()``); ``tdp_w``: GPU type → TDP. Returns the Figure; with ``ax`` given,
    only the per-GPU panel is drawn on it."""
    wide = power.pivot(index="time_s", columns="device", values="watts")
    t = wide.index.to_numpy()
    if ax is None:
        fig = new_figure((11, 5.2))
        ax_gpu, ax_tot = fig.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    else:
        fig, ax_gpu, ax_tot = ax.figure, ax, None
    if wide.shape[1] <= max_lines:
        for dev in wide.columns:
            ax_gpu.plot(t, wide[dev], lw=1, label=dev)
    else:
        stage = devices.set_index("device")["stage"]
        for k, cols in wide.T.groupby(stage.reindex(wide.columns).to_numpy()).groups.items():
            ax_gpu.plot(t, wide[list(cols)].mean(axis=1), lw=1, label=f"stage {k} (mean of {len(cols)})")
    for gpu, w in tdp_w.items():
        ax_gpu.axhline(w, ls="--", color="grey", lw=0.8)
        ax_gpu.text(t[0], w, f" {gpu} TDP {w:.0f} W", va="bottom", fontsize=7, color="grey")
    ax_gpu.set_ylabel("GPU power (W)")
    ax_gpu.set_ylim(0, max(tdp_w.values(), default=float(np.nanmax(wide.to_numpy()))) * 1.12)
    ax_gpu.set_title(
        f"GPU power ({len(t)} bins of {(t[1] - t[0]) * 1e3 if len(t) > 1 else 0:.3g} ms)", fontsize=10
    )
    ax_gpu.legend(fontsize=7, loc="lower right", ncols=2)
    if ax_tot is not None:
        ax_tot.plot(t, wide.sum(axis=1) / 1e3, color="#C44E52", lw=1.2)
        ax_tot.set_ylabel("all GPUs (kW)")
        ax_tot.set_xlabel("time (s)")
        ax_tot.set_ylim(bottom=0)
    return fig
