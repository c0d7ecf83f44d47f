"""Failure rates per component class, from published fleet studies (docs/fleet.md).

``clustersim/data/failure_rates.csv`` holds one row per cause of a study — its count of
failures, the number of units it was counted over (GPUs, nodes, NICs) and the hours it
was observed — each with its source. A component class's **MTBF per unit** is
``units × hours / failures``; a job's failure rate of that class is its own count of
those units divided by that MTBF. Classes and the unit each is counted per:

* ``gpu`` — per GPU (faulty GPU, HBM, SRAM, GPU system processor, silent data corruption…)
* ``node`` — per node (host maintenance, PSU, CPU, system memory, SSD, chassis…)
* ``nic`` — per NIC (``cluster.nic.per_node`` a node)
* ``link`` — per scale-out cable of the topology (GPU–NIC and NVLink excluded)
* ``switch`` — per switch of the topology (NVSwitches included)
* ``network`` — per GPU: a study that counts switches and cables together without
  publishing the fabric's counts of each (Llama 3's "network switch/cable")
* ``software`` — per node (software bugs, NCCL timeouts, dependencies)
* ``leaf`` — per leaf switch, ``rack`` — per rack: failure domains, whose one failure
  takes several nodes (:mod:`.domains`)

``recovery.failures.study`` names one study or several (their classes must not overlap).
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from ..errors import ScenarioError

RATES_CSV = Path(__file__).resolve().parent.parent / "data" / "failure_rates.csv"

#: component class → the unit its MTBF is per
UNIT_OF = {
    "gpu": "gpu",
    "node": "node",
    "nic": "nic",
    "link": "link",
    "switch": "switch",
    "network": "gpu",
    "software": "node",
    "leaf": "leaf",
    "rack": "rack",
}
#: classes whose failure takes a node out of the job (it needs a spare or a repair)
HARDWARE = frozenset({"gpu", "node", "nic"})


@cache
def studies(path: Path = RATES_CSV) -> dict[str, dict[str, float]]:
    """Study → component class → MTBF per unit in seconds (module doc)."""
    counts: dict[str, dict[str, list[float]]] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            comp = row["component"]
            if comp not in UNIT_OF or row["unit"] != UNIT_OF[comp]:
                raise ValueError(
                    f"{path.name}: {row['cause']!r}: {comp!r} is counted per {UNIT_OF.get(comp)}"
                )
            exposure = float(row["units"]) * float(row["hours"]) * 3600.0  # unit-seconds observed
            acc = counts.setdefault(row["study"], {}).setdefault(comp, [0.0, exposure])
            if acc[1] != exposure:  # one class of one study is observed over one population
                raise ValueError(f"{path.name}: {row['cause']!r}: units × hours differ within {comp!r}")
            acc[0] += float(row["count"])
    return {s: {c: exposure / n for c, (n, exposure) in comps.items()} for s, comps in counts.items()}


def job_rates(spec, counts: dict[str, int]) -> dict[str, float]:
    """Component class → failures per second of the whole job: the studies' MTBFs (if
    ``spec.study``) with ``spec.mtbf``'s per-unit MTBFs overriding them (0 or absent:
    none), times the job's count of each unit."""
    mtbf = {}
    for name in study_names(spec.study):
        mtbf.update(studies()[name])
    mtbf.update(spec.mtbf)
    return {c: counts[UNIT_OF[c]] / m for c, m in mtbf.items() if m > 0 and counts[UNIT_OF[c]]}


def study_names(study: str | list[str] | None) -> tuple[str, ...]:
    """The study names of ``recovery.failures.study`` (one name, a list or None)."""
    if study is None:
        return ()
    return (study,) if isinstance(study, str) else tuple(study)


def check_study(study: str | list[str] | None) -> str | list[str] | None:
    """``study`` if each name is a study of the rates table and no class is in two of
    them (or None), else a ScenarioError."""
    seen: dict[str, str] = {}
    for name in study_names(study):
        if name not in studies():
            raise ScenarioError(
                "recovery.failures.study",
                name,
                f"not a study of {RATES_CSV.name}; known: {', '.join(studies())}",
            )
        for c in studies()[name]:
            if c in seen:
                raise ScenarioError(
                    "recovery.failures.study",
                    study,
                    f"studies whose classes do not overlap ({c!r} is in {seen[c]} and {name})",
                )
            seen[c] = name
    return study
