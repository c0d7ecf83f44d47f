"""The Result of a simulation: spans, per-device table, memory timeline, summary.

Everything here is computed from the recorded spans and memory samples — never from
engine internals — so a saved and reloaded result draws and reports the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from . import metrics
from .recorder import SPAN_FIELDS


class Result:
    """What happened in one simulation. See DESIGN §3 for the fields.

    Attributes:
        summary: dict of headline metrics (iteration_time_s, samples_per_s, bubble_fraction, …).
        spans: DataFrame, one row per activity (GPU ops and link busy periods).
        devices: DataFrame, one row per GPU (stage, ranks, busy/bubble fractions, memory, oom).
        memory: DataFrame of (device, time_s, allocated_bytes) after every change.
        scenario: the resolved scenario dict (every default filled).
    """

    def __init__(self, summary: dict[str, Any], spans: pd.DataFrame, devices: pd.DataFrame,
                 memory: pd.DataFrame, scenario: dict[str, Any]):
        self.summary, self.spans, self.devices, self.memory, self.scenario = summary, spans, devices, memory, scenario

    def utilization(self, window: tuple[float, float] | None = None) -> pd.DataFrame:
        """Busy fraction of every GPU lane and link over ``window`` (default: the whole run)."""
        if window is None:
            window = (0.0, float(self.spans["end_s"].max()))
        return metrics.lane_utilization(self.spans, window)

    def plot_gantt(self, ax=None, devices=None, window=None, links: bool = False):
        """Gantt timeline, one row per GPU lane (and per link with ``links=True``)."""
        from ..viz.gantt import plot_gantt

        return plot_gantt(self.spans, ax=ax, devices=devices, window=window, links=links,
                          title=self.scenario.get("name", ""))

    def plot_utilization(self, ax=None):
        """Bar chart of the busy fraction of every GPU lane (and the busiest links)."""
        from ..viz.utilization import plot_utilization

        return plot_utilization(self.utilization(), ax=ax)

    def to_chrome_trace(self, path: str | Path) -> Path:
        """Write a Chrome/Perfetto trace (open it in ui.perfetto.dev)."""
        from .chrome import write_chrome_trace

        return write_chrome_trace(self.spans, Path(path))

    def save(self, directory: str | Path) -> Path:
        """Write summary.json, spans.csv, devices.csv, memory.csv, gantt.png,
        utilization.png, trace.json and scenario.resolved.yaml into ``directory``."""
        import matplotlib.pyplot as plt

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(self.summary, indent=2) + "\n")
        self.spans.to_csv(out / "spans.csv", index=False)
        self.devices.to_csv(out / "devices.csv", index=False)
        self.memory.to_csv(out / "memory.csv", index=False)
        (out / "scenario.resolved.yaml").write_text(yaml.safe_dump(self.scenario, sort_keys=False))
        self.to_chrome_trace(out / "trace.json")
        for name, fig in (("gantt.png", self.plot_gantt()), ("utilization.png", self.plot_utilization())):
            fig.savefig(out / name, dpi=110, bbox_inches="tight")
            plt.close(fig)
        return out

    def __repr__(self) -> str:
        s = self.summary
        return (f"Result(iteration_time_s={s['iteration_time_s']:.6g}, bubble_fraction={s['bubble_fraction']:.4f}, "
                f"num_gpus={s['num_gpus']}, oom={s['oom']})")


def spans_frame(program, recorder) -> pd.DataFrame:
    """The spans DataFrame: executed Program ops (their static fields joined with the
    recorded times) plus the fabric's link spans, sorted by start time (stable)."""
    ops = program.ops
    rows = []
    for i, start, end in recorder.ops:
        o = ops[i]
        rows.append((f"gpu{o.device}", o.lane, o.kind, o.name, o.stage, o.microbatch, start, end,
                     o.nbytes, o.flops, o.phase, o.iteration))
    rows += recorder.spans
    df = pd.DataFrame.from_records(rows, columns=list(SPAN_FIELDS))
    return df.sort_values(["start_s", "device", "lane"], kind="stable").reset_index(drop=True)
