"""NICs' and switches' power from their datasheets (``clustersim/data/network_power.csv``,
docs/energy.md): what an ``energy`` section's unset ``nic_power`` / ``switch_power`` take.

Each row is one part — its port rate, its typical power with passive cables (the number
its datasheet gives; optics and active cables draw more: a switch's ``max_w``) and its
source. A cluster's NICs take the row of a ``nic`` whose port rate is the NIC's line rate
(``cluster.nic.bandwidth`` × 8, before efficiency); its fabric switches (leaves, spines,
routers: the topology's switches outside the servers) the ``switch`` row of that rate.
Without a row of the rate a part draws nothing, and the summary says so
(``network_power_rows``). NVSwitches have no sourced figure and draw nothing by default.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

NETWORK_POWER_CSV = Path(__file__).resolve().parent.parent / "data" / "network_power.csv"


@dataclass(frozen=True)
class NetworkPower:
    """Watts per NIC and per fabric switch, and the parts (rows) they come from (None:
    no row of the rate)."""

    nic_w: float
    switch_w: float
    nic_model: str | None
    switch_model: str | None


@cache
def _rows() -> dict[tuple[str, float], dict[str, str]]:
    with open(NETWORK_POWER_CSV, newline="") as fh:
        return {(r["kind"], float(r["port_gbps"])): r for r in csv.DictReader(fh)}


def datasheet_power(kind: str, port_gbps: float) -> tuple[float, str | None]:
    """(typical watts, model) of the ``kind`` part (``nic`` | ``switch``) of ``port_gbps``;
    (0, None) without a row of that rate."""
    row = _rows().get((kind, float(port_gbps)))
    return (0.0, None) if row is None else (float(row["typical_w"]), row["model"])


def default_network_power(cluster: dict) -> NetworkPower:
    """The datasheet defaults for ``cluster`` (a resolved ClusterSpec dict; module doc)."""
    gbps = round(float(cluster["nic"]["bandwidth"]) * 8 / 1e9, 6)
    nic_w, nic_model = datasheet_power("nic", gbps)
    switch_w, switch_model = datasheet_power("switch", gbps)
    return NetworkPower(nic_w, switch_w, nic_model, switch_model)
