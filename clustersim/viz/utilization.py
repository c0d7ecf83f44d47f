"""Utilization bar chart: busy fraction per GPU lane, plus the busiest links."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402


def plot_utilization(util, ax=None, top_links: int = 10):
    """Horizontal bars of ``busy_fraction`` from ``Result.utilization()``; returns the Figure."""
    gpus = util[util["lane"] != "link"].sort_values(["device", "lane"])
    links = util[util["lane"] == "link"].nlargest(top_links, "busy_fraction")
    rows = list(zip(gpus["device"] + " " + gpus["lane"], gpus["busy_fraction"]))
    rows += list(zip("link " + links["device"], links["busy_fraction"]))
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, max(2.0, 0.28 * len(rows) + 1.0)))
    else:
        fig = ax.figure
    ax.barh(range(len(rows)), [v for _, v in rows], color="#4C72B0")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([n for n, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("busy fraction over the run")
    ax.set_title("utilization")
    fig.tight_layout()
    return fig
