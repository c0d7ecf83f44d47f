"""Plots of sweeps and searches (matplotlib): throughput per plan, the throughput–memory
Pareto front, and a heatmap over two swept axes. Each takes a DataFrame of rows (from
:func:`~clustersim.experiments.sweep.sweep` or ``SearchResult.table``) and returns a Figure.
"""

from __future__ import annotations

import pandas as pd


def _axes(ax, size=(7, 4)):
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=size)
        return fig, ax
    return ax.figure, ax


def _throughput_col(df: pd.DataFrame) -> str:
    for col in ("throughput", "tokens_per_s", "samples_per_s"):
        if col in df.columns and df[col].notna().any():
            return col
    raise ValueError("no throughput column (throughput, tokens_per_s or samples_per_s) with values")


def pareto_front(df: pd.DataFrame, x: str = "peak_memory_gib", y: str | None = None) -> pd.DataFrame:
    """Rows not dominated by another row: nothing else has at most their ``x`` (memory)
    and at least their ``y`` (throughput), one of them strictly. Sorted by ``x``."""
    y = y or _throughput_col(df)
    pts = df.dropna(subset=[x, y]).sort_values([x, y], ascending=[True, False], kind="stable")
    keep, best = [], float("-inf")
    for idx, val in zip(pts.index, pts[y]):
        if val > best:
            keep.append(idx)
            best = val
    return pts.loc[keep]


def plot_throughput(df: pd.DataFrame, by: str = "plan", ax=None, y: str | None = None):
    """Throughput of every row, one bar per ``by`` value (a plan label or ``num_gpus``);
    with several rows per value (e.g. plans per GPU count) the best one is drawn."""
    y = y or _throughput_col(df)
    fig, ax = _axes(ax)
    best = df.dropna(subset=[y]).groupby(by, sort=False)[y].max()
    if by != "plan":
        best = best.sort_index()
    ax.bar([str(i) for i in best.index], best.values, color="#4C72B0")
    ax.set_xlabel(by)
    ax.set_ylabel(y.replace("_", " "))
    ax.set_title(f"{y.replace('_', ' ')} by {by}")
    ax.tick_params(axis="x", labelrotation=45 if len(best) > 6 else 0)
    fig.tight_layout()
    return fig


def plot_pareto(
    df: pd.DataFrame, ax=None, x: str = "peak_memory_gib", y: str | None = None, label: str = "plan"
):
    """Throughput vs peak memory per GPU, every row a point, the Pareto front joined
    and labelled: the plans worth considering for each memory budget."""
    y = y or _throughput_col(df)
    fig, ax = _axes(ax)
    pts = df.dropna(subset=[x, y])
    ax.scatter(pts[x], pts[y], color="#999999", s=18, label="plans")
    front = pareto_front(pts, x, y)
    ax.plot(front[x], front[y], "o-", color="#C44E52", label="Pareto front")
    if label in front.columns:
        for _, row in front.iterrows():
            ax.annotate(
                str(row[label]), (row[x], row[y]), textcoords="offset points", xytext=(4, 4), fontsize=8
            )
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def plot_heatmap(df: pd.DataFrame, x: str, y: str, value: str | None = None, ax=None, fmt: str = "{:.3g}"):
    """A heatmap of ``value`` (default: throughput) over two swept axes ``x`` and ``y``
    (the best value where several rows share a cell); empty cells are runs that failed."""
    value = value or _throughput_col(df)
    fig, ax = _axes(ax, (6, 4))
    table = df.pivot_table(index=y, columns=x, values=value, aggfunc="max")
    im = ax.imshow(table.values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(table.columns)), [str(c) for c in table.columns])
    ax.set_yticks(range(len(table.index)), [str(i) for i in table.index])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    for i in range(table.shape[0]):
        for j in range(table.shape[1]):
            v = table.values[i, j]
            if pd.notna(v):
                ax.text(j, i, fmt.format(v), ha="center", va="center", color="white", fontsize=8)
    fig.colorbar(im, ax=ax, label=value.replace("_", " "))
    fig.tight_layout()
    return fig
