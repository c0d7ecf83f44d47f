"""Metric definitions, computed from the spans DataFrame alone (see docs/metrics.md).

* iteration window k: from the first start to the last end of GPU spans of iteration k;
  the reported iteration time is the last simulated iteration's (steady state);
* busy time of a lane in a window: total length of its spans clipped to the window
  (spans on one lane never overlap);
* bubble fraction of a device: 1 − compute-lane busy time / iteration time, in the
  reported iteration; of a stage: the mean over its devices; reported as mean and max
  over stages;
* exposed communication fraction: time inside the iteration when a device's compute
  lane is idle while one of its communication lanes is busy, / iteration time, averaged
  over devices.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def gpu_spans(spans: pd.DataFrame) -> pd.DataFrame:
    return spans[spans["lane"] != "link"]


def iteration_window(spans: pd.DataFrame, iteration: int | None = None) -> tuple[float, float]:
    """(start, end) of an iteration (default: the last one) over all GPU spans."""
    g = gpu_spans(spans)
    k = int(g["iteration"].max()) if iteration is None else iteration
    it = g[g["iteration"] == k]
    return float(it["start_s"].min()), float(it["end_s"].max())


def busy_time(starts: np.ndarray, ends: np.ndarray, t0: float, t1: float) -> float:
    """Union length of intervals clipped to [t0, t1]."""
    s = np.clip(starts, t0, t1)
    e = np.clip(ends, t0, t1)
    keep = e > s
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return 0.0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    # each interval adds only what reaches past every earlier interval's end
    reach = np.maximum.accumulate(e)
    prev = np.r_[s[0], reach[:-1]]
    return float(np.clip(e - np.maximum(s, prev), 0.0, None).sum())


def device_bubbles(spans: pd.DataFrame, window: tuple[float, float]) -> dict[str, float]:
    """Per GPU: compute-lane idle fraction inside ``window``."""
    t0, t1 = window
    length = t1 - t0
    comp = spans[spans["lane"] == "compute"]
    out = {}
    for dev, df in comp.groupby("device", sort=False):
        busy = busy_time(df["start_s"].to_numpy(), df["end_s"].to_numpy(), t0, t1)
        out[dev] = 1.0 - busy / length if length > 0 else 0.0
    return out


def exposed_comm(spans: pd.DataFrame, window: tuple[float, float]) -> float:
    """Mean over GPUs of (comm busy ∧ compute idle) time / window length."""
    t0, t1 = window
    length = t1 - t0
    g = gpu_spans(spans)
    if length <= 0 or g.empty:
        return 0.0
    fractions = []
    for _dev, df in g.groupby("device", sort=False):
        comp = df[df["lane"] == "compute"]
        union = busy_time(df["start_s"].to_numpy(), df["end_s"].to_numpy(), t0, t1)
        compute = busy_time(comp["start_s"].to_numpy(), comp["end_s"].to_numpy(), t0, t1)
        fractions.append((union - compute) / length)
    return float(np.mean(fractions))


def lane_utilization(spans: pd.DataFrame, window: tuple[float, float]) -> pd.DataFrame:
    """Time-weighted busy fraction of every (device, lane), links included, in ``window``."""
    t0, t1 = window
    rows = []
    for (dev, lane), df in spans.groupby(["device", "lane"], sort=False):
        busy = busy_time(df["start_s"].to_numpy(), df["end_s"].to_numpy(), t0, t1)
        rows.append((dev, lane, busy, busy / (t1 - t0) if t1 > t0 else 0.0, int(df["bytes"].sum())))
    return pd.DataFrame(rows, columns=["device", "lane", "busy_s", "busy_fraction", "bytes"])
