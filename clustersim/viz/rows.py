"""Row order and labels shared by every picture and the Chrome trace: which devices, lanes
and links, in what order (no matplotlib here: writing a JSON trace must not load it).

Everything is derived from ``res.spans`` and, where given, ``res.devices`` (for stage and
node labels), so a reloaded bundle lays out the same rows.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..metrics import gpu_spans

#: GPU lanes top to bottom inside one device's block of rows
LANE_ORDER = {"compute": 0, "tp": 1, "comm": 2, "gather": 3, "send": 4, "recv": 5}
#: above this many GPUs the Gantt draws one aggregated row per stage (or node) instead
AGGREGATE_ABOVE = 32


def natural_key(name: str) -> list:
    """Sort key that puts ``gpu2`` before ``gpu10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(name))]


def device_names(devices) -> set[str] | None:
    """``devices`` (ints or names) as a set of device names; None stays None."""
    if devices is None:
        return None
    if isinstance(devices, (int, np.integer, str)):
        devices = [devices]
    return {f"gpu{int(d)}" if isinstance(d, (int, np.integer)) else str(d) for d in devices}


def num_gpus(spans: pd.DataFrame) -> int:
    """How many GPUs have spans (what decides the aggregated views)."""
    return gpu_spans(spans)["device"].nunique()


def device_info(spans: pd.DataFrame, devices: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per GPU seen in ``spans`` (natural order): ``stage`` and ``node``.

    From ``devices`` when given, else the most common stage of the GPU's compute spans
    and node −1."""
    names = sorted(gpu_spans(spans)["device"].unique(), key=natural_key)
    if devices is not None and len(devices) and {"device", "stage", "node"} <= set(devices.columns):
        info = devices.set_index("device")[["stage", "node"]]
        names = sorted(set(names) | set(info.index), key=natural_key)
        return info.reindex(names).fillna(-1).astype(int)
    comp = spans[(spans["lane"] == "compute") & (spans["stage"] >= 0)]
    stage = comp.groupby("device")["stage"].agg(lambda s: int(s.mode().iloc[0])) if len(comp) else pd.Series()
    out = pd.DataFrame(index=pd.Index(names, name="device"))
    out["stage"] = stage.reindex(names).fillna(-1).astype(int)
    out["node"] = -1
    return out


def lane_rows(spans: pd.DataFrame) -> list[tuple[str, str]]:
    """(device, lane) pairs of GPU lanes, device by device, lanes in :data:`LANE_ORDER`."""
    g = gpu_spans(spans)
    pairs = set(zip(g["device"], g["lane"]))
    return sorted(pairs, key=lambda r: (natural_key(r[0]), LANE_ORDER.get(r[1], 9), natural_key(r[1])))


def busiest_links(spans: pd.DataFrame, top: int | None) -> list[str]:
    """Link names ordered by total busy time, busiest first (``top`` of them)."""
    links = spans[spans["lane"] == "link"]
    if links.empty:
        return []
    busy = (links["end_s"] - links["start_s"]).groupby(links["device"]).sum()
    busy = busy.sort_values(ascending=False, kind="stable")
    names = list(busy.index)
    return names if top is None else names[:top]
