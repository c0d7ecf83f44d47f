"""Pictures of a long job under failures drawn at rates (docs/fleet.md): the failures of
each seeded job on a time axis, and goodput against the checkpoint interval with the
Young/Daly optimum marked."""

from __future__ import annotations

import pandas as pd

from .layout import new_figure

#: component class → colour of its failures
COMPONENT_COLORS = {
    "gpu": "#C44E52",
    "node": "#DD8452",
    "nic": "#8172B2",
    "link": "#4C72B0",
    "switch": "#64B5CD",
    "network": "#4C72B0",
    "software": "#937860",
}


def plot_failures(failures: pd.DataFrame, ax=None):
    """One row per seed: a bar per failure's time down (from its time), coloured by the
    failed component class; returns the Figure."""
    if ax is None:
        fig = new_figure((11, 1.2 + 0.35 * max(1, failures["seed"].nunique())))
        ax = fig.add_subplot()
    fig = ax.figure
    seeds = sorted(failures["seed"].unique())
    for comp, group in failures.groupby("component"):
        for i, seed in enumerate(seeds):
            rows = group[group["seed"] == seed]
            spans = list(zip(rows["time_s"] / 3600.0, rows["down_s"].clip(lower=1.0) / 3600.0))
            ax.broken_barh(
                spans,
                (i - 0.35, 0.7),
                color=COMPONENT_COLORS.get(comp, "grey"),
                label=comp if i == 0 else None,
            )
    ax.set_yticks(range(len(seeds)))
    ax.set_yticklabels([f"seed {s}" for s in seeds], fontsize=8)
    ax.set_xlabel("job time (h)")
    ax.set_title("failures drawn at rates (bar: time down)", fontsize=10)
    if len(failures):
        ax.legend(fontsize=8, loc="upper right", ncols=4)
    return fig


def plot_goodput_curve(curve: pd.DataFrame, young_daly_s: float | None = None, ax=None):
    """Mean goodput fraction against the checkpoint interval (± 2 standard errors shaded),
    Young/Daly's √(2·δ·MTBF) as a dashed line; returns the Figure."""
    if ax is None:
        fig = new_figure((7, 3.6))
        ax = fig.add_subplot()
    fig = ax.figure
    x, g, se = curve["interval_s"], curve["goodput_mean"], curve["goodput_se"]
    ax.fill_between(x, g - 2 * se, g + 2 * se, color="#4C72B0", alpha=0.25, lw=0)
    ax.plot(x, g, marker="o", ms=3, color="#4C72B0", label="simulated (mean of seeds)")
    if young_daly_s is not None:
        ax.axvline(young_daly_s, color="#C44E52", ls="--", label=f"√(2·δ·MTBF) = {young_daly_s:.3g} s")
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval (s of work)")
    ax.set_ylabel("goodput fraction")
    ax.legend(fontsize=8)
    return fig
