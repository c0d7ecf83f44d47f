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
#: Gantt row heights (in row units): compute rows carry the picture, communication and
#: link rows — busy a few per cent of the time in most runs — are half as tall
COMPUTE_ROW, COMM_ROW = 1.0, 0.5
#: inches per row unit, the figure's fixed part (title, axis, margins) and its cap: a
#: Gantt is at most 14 in tall (1,400 px at matplotlib's 100 dpi, 1,540 px in a bundle's
#: 110); what does not fit as one row per GPU lane is drawn aggregated per stage
ROW_IN, FRAME_IN, MAX_HEIGHT_IN = 0.22, 1.3, 14.0


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


def device_info(spans: pd.DataFrame, devices: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per GPU seen in ``spans`` (natural order): ``stage``, ``node`` and ``gpu``
    (the GPU type), and ``job`` when ``devices`` has it (a multi-job run).

    From ``devices`` when given, else the most common stage of the GPU's compute spans,
    node −1 and an empty type."""
    names = sorted(gpu_spans(spans)["device"].unique(), key=natural_key)
    if devices is not None and len(devices) and {"device", "stage", "node"} <= set(devices.columns):
        table = devices.set_index("device")
        names = sorted(set(names) | set(table.index), key=natural_key)
        info = table[["stage", "node"]].reindex(names).fillna(-1).astype(int)
        gpu = table["gpu"] if "gpu" in table.columns else pd.Series("", index=table.index)
        info["gpu"] = gpu.reindex(names).fillna("").astype(str)
        if "job" in table.columns:  # a multi-job run (docs/multi_job.md): rows say whose GPU
            info["job"] = table["job"].reindex(names).fillna("").astype(str)
        return info
    comp = spans[(spans["lane"] == "compute") & (spans["stage"] >= 0)]
    stage = comp.groupby("device")["stage"].agg(lambda s: int(s.mode().iloc[0])) if len(comp) else pd.Series()
    out = pd.DataFrame(index=pd.Index(names, name="device"))
    out["stage"] = stage.reindex(names).fillna(-1).astype(int)
    out["node"] = -1
    out["gpu"] = ""
    return out


def gpu_types_differ(info: pd.DataFrame) -> bool:
    """Whether the GPUs of ``info`` (:func:`device_info`) are of more than one type: only
    then do picture labels name the type."""
    return info["gpu"][info["gpu"] != ""].nunique() > 1


def row_height(lane: str) -> float:
    """Height of a Gantt row of ``lane`` in row units (:data:`COMPUTE_ROW`, :data:`COMM_ROW`)."""
    return COMPUTE_ROW if lane == "compute" else COMM_ROW


def gantt_height_in(units: float) -> float:
    """Figure height (inches) of a Gantt with ``units`` row units, capped at :data:`MAX_HEIGHT_IN`."""
    return min(MAX_HEIGHT_IN, FRAME_IN + ROW_IN * units)


def per_lane_fits(spans: pd.DataFrame) -> bool:
    """Whether one row per GPU lane of ``spans`` fits under the height cap; if not, the
    default Gantt (and the bundle's heatmap) switch to the per-stage view."""
    units = sum(row_height(lane) for _, lane in lane_rows(spans))
    return FRAME_IN + ROW_IN * units <= MAX_HEIGHT_IN


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
