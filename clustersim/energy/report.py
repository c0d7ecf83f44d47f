"""Energy of a simulated step: per GPU, the network's NICs and switches (given, or their
datasheets': :mod:`.network_power`), the facility (PUE), per step and per token, next to
the cost per token (docs/energy.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..metrics import gpu_spans, iteration_window
from .gpu_power import gpu_power
from .network_power import default_network_power
from .timeline import PowerTrace

#: NVML's power readings average ~100 ms (Ampere and later): the peak is over such bins
PEAK_BIN_S = 0.1


@dataclass(frozen=True)
class EnergySettings:
    """``pue``: facility energy / IT energy; ``nic_w`` and ``switch_w``: each NIC's and
    switch's power (constant); ``price_per_kwh`` and ``price_per_gpu_hour`` for the costs
    (None: not reported)."""

    pue: float = 1.0
    nic_w: float = 0.0
    switch_w: float = 0.0
    price_per_kwh: float | None = None
    price_per_gpu_hour: float | None = None


def gpu_traces(
    spans, devices, window=None, folded: bool = False, memory: str = "limit"
) -> dict[str, PowerTrace]:
    """Every GPU of the ``devices`` table → its :class:`PowerTrace` in ``window`` (default:
    the reported iteration). A GPU with no span is idle, except in a folded run, where it
    is a twin of its stage's simulated GPUs and takes their mean trace (one piece: their
    mean power). ``memory``: the bracket of memory-bound power (:mod:`.gpu_power`)."""
    window = window or iteration_window(spans)
    g = gpu_spans(spans)
    g = g[(g["end_s"] > window[0]) & (g["start_s"] < window[1])]
    by_dev = dict(tuple(g.groupby("device", sort=False)))
    out: dict[str, PowerTrace] = {}
    for dev, gpu in zip(devices["device"], devices["gpu"]):
        gp = gpu_power(gpu, memory)
        out[dev] = (
            PowerTrace.of_spans(by_dev[dev], gp, window) if dev in by_dev else PowerTrace.idle(gp, window)
        )
    if folded:
        length = window[1] - window[0]
        for _, rows in devices.groupby("stage"):
            sim = [d for d in rows["device"] if d in by_dev]
            mean = np.mean([out[d].energy_j() for d in sim]) / length if sim else None
            for d in rows["device"]:
                if d not in by_dev and mean is not None:
                    out[d] = PowerTrace(np.array(window, dtype=float), np.array([mean]))
    return out


def energy_table(traces: dict[str, PowerTrace], devices: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU: ``energy_j``, ``mean_w`` and ``peak_w`` (the highest mean over
    :data:`PEAK_BIN_S` bins, or over the window if it is shorter)."""
    rows = []
    for dev, gpu in zip(devices["device"], devices["gpu"]):
        tr = traces[dev]
        t0, t1 = float(tr.edges[0]), float(tr.edges[-1])
        bins = max(1, round((t1 - t0) / PEAK_BIN_S))
        e = tr.energy_j()
        rows.append((dev, gpu, e, e / (t1 - t0) if t1 > t0 else 0.0, float(tr.binned(t0, t1, bins).max())))
    return pd.DataFrame(rows, columns=["device", "gpu", "energy_j", "mean_w", "peak_w"])


def energy_summary(
    table: pd.DataFrame, seconds: float, units: dict, summary: dict, s: EnergySettings
) -> dict:
    """The summary's energy fields for one step of ``seconds`` (docs/energy.md): GPU, NIC
    and switch energy, IT and facility energy, per step and per token, mean and peak GPU
    power, and the costs per million tokens."""
    gpu_j = float(table["energy_j"].sum())
    nic_j = units["nic"] * s.nic_w * seconds
    switch_j = units["switch"] * s.switch_w * seconds
    it_j = gpu_j + nic_j + switch_j
    facility_j = it_j * s.pue
    tokens = (summary.get("tokens_per_s") or 0.0) * summary["iteration_time_s"]
    out = {
        "gpu_energy_j": gpu_j,
        "nic_energy_j": nic_j,
        "switch_energy_j": switch_j,
        "it_energy_j": it_j,
        "energy_per_step_j": facility_j,
        "energy_per_token_j": facility_j / tokens if tokens else None,
        "mean_gpu_power_w": float(table["mean_w"].mean()),
        "peak_gpu_power_w": float(table["peak_w"].max()),
        "pue": s.pue,
        # the facility's draw with every GPU idle (a job's time down, docs/fleet.md)
        "idle_power_w": s.pue
        * (
            sum(gpu_power(g).idle_w for g in table["gpu"])
            + units["nic"] * s.nic_w
            + units["switch"] * s.switch_w
        ),
    }
    if s.price_per_kwh is not None and tokens:
        out["energy_cost_per_mtok"] = facility_j / 3.6e6 * s.price_per_kwh / tokens * 1e6
    if s.price_per_gpu_hour is not None and tokens:  # price × hours, as plan search ranks by
        out["gpu_hour_cost_per_mtok"] = len(table) * seconds / 3600 * s.price_per_gpu_hour / tokens * 1e6
    return out


def attach_energy(result, spec: dict, cluster: dict) -> None:
    """Add the step's energy fields to ``result.summary`` (``spec``: the scenario's
    ``energy`` section, ``cluster``: its resolved cluster; docs/energy.md)."""
    from ..topology import build_topology
    from ..topology.inventory import unit_counts

    window = iteration_window(result.spans)
    folded = str(result.summary.get("folded", "")).startswith("yes")
    table = energy_table(gpu_traces(result.spans, result.devices, window, folded), result.devices)
    low = energy_table(gpu_traces(result.spans, result.devices, window, folded, "dram"), result.devices)
    units = unit_counts(cluster, build_topology(cluster))
    sheet = default_network_power(cluster)
    nic_w, switch_w = spec.get("nic_power"), spec.get("switch_power")
    if switch_w is None:  # the datasheet's switch: the fabric's own (module doc of .network_power)
        units = {**units, "switch": units["fabric_switch"]}
    settings = EnergySettings(
        pue=spec["pue"],
        nic_w=sheet.nic_w if nic_w is None else nic_w,
        switch_w=sheet.switch_w if switch_w is None else switch_w,
        price_per_kwh=spec.get("price_per_kwh"),
        price_per_gpu_hour=spec.get("price_per_gpu_hour"),
    )
    result.summary.update(energy_summary(table, window[1] - window[0], units, result.summary, settings))
    result.summary["nic_power_w"], result.summary["switch_power_w"] = settings.nic_w, settings.switch_w
    result.summary["network_power_rows"] = {  # where each part's watts came from
        "nic": "energy.nic_power" if nic_w is not None else sheet.nic_model,
        "switch": "energy.switch_power" if switch_w is not None else sheet.switch_model,
    }
    result.summary["gpu_energy_dram_j"] = float(low["energy_j"].sum())  # the lower bracket
    result.summary["mean_gpu_power_dram_w"] = float(low["mean_w"].mean())
