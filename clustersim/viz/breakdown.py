"""Where each stage's iteration time goes: compute / exposed communication / bubble / idle.

The numbers are :func:`clustersim.metrics.device_breakdown`'s. For every GPU, inside
the reported iteration's window ``[t0, t1]`` (see docs/metrics.md):

* ``compute``  — compute-lane busy time;
* ``exposed_comm`` — a communication lane (send, recv, tp, comm, …) busy while compute is
  idle (split by parallelism in ``exposed_tp`` … ``exposed_dp``);
* ``bubble`` — neither, before the GPU's last span of the iteration ends (it waits on the
  pipeline or a collective's other members);
* ``idle`` — after that last span, until the iteration ends (done, waiting for the rest).

Each is divided by ``t1 − t0``, so the four sum to 1 and ``bubble + idle`` is the GPU's
``bubble_fraction`` in ``res.devices``. A stage's value is the mean over its
GPUs.
"""

from __future__ import annotations

import pandas as pd

from ..metrics import PARTS, device_breakdown
from .colors import IDLE_COLOR
from .layout import new_figure
from .rows import device_info

PART_COLORS = {"compute": "#4C72B0", "exposed_comm": "#C44E52", "bubble": "#CCB974", "idle": IDLE_COLOR}


def stage_breakdown(
    spans: pd.DataFrame, device_table: pd.DataFrame | None = None, window: tuple[float, float] | None = None
) -> pd.DataFrame:
    """:func:`device_breakdown` averaged per stage (index: stage)."""
    per_dev = device_breakdown(spans, window)
    info = device_info(spans, device_table)
    per_dev["stage"] = per_dev["device"].map(info["stage"])
    return per_dev.groupby("stage")[list(PARTS)].mean()


def plot_breakdown(spans, device_table=None, ax=None, window=None, title: str = ""):
    """Stacked horizontal bar per stage of :data:`PARTS`; returns the Figure."""
    table = stage_breakdown(spans, device_table, window)
    if ax is None:
        fig = new_figure((9, max(2.2, 0.34 * len(table) + 1.4)))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    left = pd.Series(0.0, index=table.index)
    y = range(len(table))
    for part in PARTS:
        ax.barh(
            y,
            table[part],
            left=left,
            color=PART_COLORS[part],
            edgecolor="#BBBBBB",
            linewidth=0.5,
            label=part.replace("_", " "),
        )
        if len(table) <= 32:
            for i, (lo, w) in enumerate(zip(left, table[part])):
                if w >= 0.06:
                    ax.text(
                        lo + w / 2,
                        i,
                        f"{w:.0%}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="black" if part in ("idle", "bubble") else "white",
                    )
        left += table[part]
    step = max(1, len(table) // 32)
    ax.set_yticks(list(y)[::step])
    ax.set_yticklabels([f"stage {s}" for s in table.index][::step], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("fraction of the iteration")
    ax.set_title(title or "where each stage's iteration goes", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
