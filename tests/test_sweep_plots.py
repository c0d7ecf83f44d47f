"""Plots of sweeps and searches: the Pareto front is exactly the non-dominated rows, and
each plot draws what it is given."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from clustersim.experiments import sweep  # noqa: E402
from clustersim.experiments.plots import pareto_front, plot_heatmap, plot_pareto, plot_throughput  # noqa: E402
from tests.conftest import synthetic  # noqa: E402


def test_pareto_front_is_the_non_dominated_rows():
    df = pd.DataFrame(
        {
            "peak_memory_gib": [10, 20, 15, 30, 25, 20],
            "throughput": [1.0, 3.0, 2.0, 3.0, 4.0, 2.5],
            "plan": list("abcdef"),
        }
    )
    front = pareto_front(df)
    assert list(front["plan"]) == ["a", "c", "b", "e"]
    for _, r in df.iterrows():
        dominated = (
            (df["peak_memory_gib"] <= r["peak_memory_gib"])
            & (df["throughput"] >= r["throughput"])
            & ((df["peak_memory_gib"] < r["peak_memory_gib"]) | (df["throughput"] > r["throughput"]))
        ).any()
        assert dominated == (r["plan"] not in set(front["plan"]))


def test_plots_of_a_real_sweep():
    base = synthetic(p=4, m=8, activation=2**20, params=2**24)
    base["parallel"]["dp"] = "auto"
    df = sweep(base, {"parallel.pp": [1, 2, 4], "parallel.schedule": ["1f1b", "gpipe"]}, workers=1)
    df["plan"] = "pp" + df["parallel.pp"].astype(str) + " " + df["parallel.schedule"]
    fig = plot_heatmap(df, "parallel.pp", "parallel.schedule", "samples_per_s")
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (2, 3)
    assert (
        image[0, 0]
        == df[(df["parallel.pp"] == 1) & (df["parallel.schedule"] == "1f1b")]["samples_per_s"].iloc[0]
    )
    fig2 = plot_pareto(df)
    line = fig2.axes[0].lines[0]
    assert len(line.get_xdata()) == len(pareto_front(df))
    fig3 = plot_throughput(df)
    assert len(fig3.axes[0].patches) == len(df)
    for f in (fig, fig2, fig3):
        plt.close(f)
