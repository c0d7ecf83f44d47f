"""Collective-level validation: every row of ``nccl_collective_measurements.csv`` (published
nccl-tests bus bandwidths, each with its source) next to what clustersim's collectives
predict for it on the matching cluster preset, grouped per system.

A row names the cluster it is compared with in its ``cluster`` column: a preset of
:data:`clustersim.hardware.presets.CLUSTER_PRESETS`, optionally followed by ``field=value``
overrides of that preset (``dgx_a100 nic.per_node=4`` for an A100 server with four NICs).
The prediction is :func:`clustersim.collectives.bench.measure` — the nccl-tests definitions
of algorithm and bus bandwidth, on the ``packet`` fabric, ``auto`` algorithm, the preset's
own α and NCCL protocols — of the row's collective over all GPUs of ``nodes`` nodes.
Nothing is fitted here: the presets' NVLink and NIC efficiencies are the
one-rule-per-link-technology values of :mod:`clustersim.hardware.presets`, and its
protocol table (``collective_protocols``) was calibrated once on the Azure ND A100 v4
curve of this file (see :data:`~clustersim.hardware.presets.NCCL_PROTOCOLS_A100`).

A row's ``role`` says what it is for: ``check`` rows are what the model claims to
reproduce and the tests assert on, per message-size band (:data:`BANDS`,
:data:`TOLERANCE`); ``context`` rows are kept for the record — an NCCL algorithm clustersim
does not model (NVLS / NVLink SHARP), a system without a preset, a run its own thread calls
anomalous — with a prediction where one can be made, never asserted on.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass
from functools import cache

from ..collectives.bench import Measurement, measure, preset_cluster
from .data import DATA
from .verdict import Verdict

MEASUREMENTS_CSV = DATA / "nccl_collective_measurements.csv"

MiB = 2**20
#: message-size bands (upper bound exclusive, name): below 1 MiB a collective is latency
#: bound; from 256 MiB nccl-tests is on its bandwidth plateau (Azure's A100 curve still dips
#: at 128 MiB); in between it ramps up
BANDS = ((MiB, "small"), (256 * MiB, "medium"), (math.inf, "large"))

#: |predicted / measured − 1| of busbw a ``check`` row stays within, per band (the tests
#: assert it). Large: the bandwidth rule per link technology holds within 15 %. Below
#: 256 MiB the cost is NCCL's per-size choice of protocol (LL, LL128, Simple;
#: :mod:`clustersim.collectives.protocol`), whose latencies and LL128 bandwidth fraction
#: are calibrated on the one A100 curve that holds every small and medium ``check`` row —
#: so those two bounds state how well the calibrated form follows that curve (the worst
#: sizes: 1 MiB, where LL hands over to LL128, and 128 MiB, where Azure's curve dips), not
#: an independent check; the 3-node 128 MiB row is one.
TOLERANCE = {"large": 0.15, "medium": 0.15, "small": 0.08}

#: more ranks than this are not simulated (the packet fabric's event count grows as n²)
MAX_SIMULATED_RANKS = 64


@dataclass(frozen=True)
class CollectiveRow:
    """One published bus bandwidth (a row of the measurements CSV); ``busbw`` in bytes/s."""

    system: str
    collective: str
    ranks: int
    nodes: int
    nbytes: int
    busbw: float
    source: str
    cluster: str
    nccl_algorithm: str
    role: str
    note: str

    @property
    def band(self) -> str:
        """The message-size band of the row (:data:`BANDS`)."""
        return next(name for bound, name in BANDS if self.nbytes < bound)


@cache
def rows() -> tuple[CollectiveRow, ...]:
    """Every row of the measurements CSV, in file order."""
    with MEASUREMENTS_CSV.open(newline="") as fh:
        return tuple(
            CollectiveRow(
                r["system"],
                r["collective"],
                int(r["ranks"]),
                int(r["nodes"]),
                int(r["bytes"]),
                float(r["busbw_GBps"]) * 1e9,
                r["source"],
                r["cluster"],
                r["nccl_algorithm"],
                r["role"],
                r["note"],
            )
            for r in csv.DictReader(fh)
        )


def cluster_of(spec: str, nodes: int) -> dict:
    """The cluster dict a row's ``cluster`` column names, with ``nodes`` nodes: a preset,
    then ``section.field=number`` overrides (``dgx_a100 nic.per_node=4``)."""
    preset, *overrides = spec.split()
    cluster = preset_cluster(preset, nodes)
    for item in overrides:
        path, value = item.split("=")
        *parents, leaf = path.split(".")
        target = cluster
        for p in parents:
            target = target[p]
        target[leaf] = type(target[leaf])(float(value))
    return cluster


@cache
def predicted(row: CollectiveRow) -> Measurement | None:
    """The simulated nccl-tests measurement of ``row``; None without a cluster or when the
    row has more than :data:`MAX_SIMULATED_RANKS` ranks."""
    if not row.cluster or row.ranks > MAX_SIMULATED_RANKS:
        return None
    return measure(cluster_of(row.cluster, row.nodes), row.collective, row.nbytes)


def error(row: CollectiveRow) -> float | None:
    """predicted / measured − 1 of the row's busbw; None where nothing is predicted."""
    p = predicted(row)
    return None if p is None else p.busbw / row.busbw - 1


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", MiB), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def _summary(group: list[CollectiveRow]) -> list[str]:
    sets = defaultdict(list)
    for r in group:
        sets[(r.collective, r.nccl_algorithm, r.nodes, r.role, r.band)].append(error(r))
    lines = [
        "| collective | NCCL algorithm | nodes | role | band | rows | rms error | largest error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (kind, algo, nodes, role, band), errs in sorted(sets.items(), key=lambda kv: kv[0][3]):
        known = [e for e in errs if e is not None]
        if known:
            rms = math.sqrt(sum(e * e for e in known) / len(known))
            stats = f"{rms:.1%} | {max(known, key=abs):+.1%}"
        else:
            stats = "not simulated | —"
        lines.append(f"| {kind} | {algo} | {nodes} | {role} | {band} | {len(errs)} | {stats} |")
    return lines


def _rows_table(group: list[CollectiveRow], sources: list[str]) -> list[str]:
    lines = [
        "| system | collective | ranks | nodes | size | measured GB/s | model GB/s | model algorithm | error "
        "| role | src |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in group:
        if r.source not in sources:
            sources.append(r.source)
        p, e = predicted(r), error(r)
        model = "— | —" if p is None else f"{p.busbw / 1e9:.4g} | {p.algorithm}"
        lines.append(
            f"| {r.system} | {r.collective} | {r.ranks} | {r.nodes} | {_size(r.nbytes)} | {r.busbw / 1e9:g} | "
            f"{model} | {'—' if e is None else f'{e:+.1%}'} | {r.role} | {sources.index(r.source) + 1} |"
        )
    return lines


def preset_verdict(preset: str, group: list[CollectiveRow]) -> Verdict:
    """Every simulated ``check`` row of ``group`` against its band's :data:`TOLERANCE`."""
    checked = [(r, error(r)) for r in group if r.role == "check"]
    checked = [(r, e) for r, e in checked if e is not None]
    failed = [
        f"{r.system} {r.collective} {_size(r.nbytes)} {e:+.1%}"
        for r, e in checked
        if abs(e) > TOLERANCE[r.band]
    ]
    detail = f"{len(checked)} check rows within their band's tolerance" if not failed else "; ".join(failed)
    return Verdict(f"collectives {preset or 'without a preset'}", not failed, detail)


def collective_verdicts() -> list[Verdict]:
    """The pass/fail of every preset's collective table."""
    return [preset_verdict(p, g) for p, g in _groups().items()]


def _groups() -> dict[str, list[CollectiveRow]]:
    groups: dict[str, list[CollectiveRow]] = defaultdict(list)
    for r in sorted(rows(), key=lambda r: not r.cluster):
        groups[r.cluster.split(" ")[0]].append(r)
    return groups


def preset_table(preset: str, group: list[CollectiveRow]) -> str:
    """The Markdown section of the rows compared with one cluster preset (or with none):
    summary per set, all rows, each system's note, sources."""
    sources: list[str] = []
    title = f"`{preset}`" if preset else "Systems without a cluster preset"
    detail = _rows_table(group, sources)
    notes = {r.system: r.note for r in group}
    lines = [
        f"### {title}",
        "",
        *_summary(group),
        "",
        "<details><summary>all rows</summary>",
        "",
        *detail,
        "",
    ]
    lines += [*(f"- {system}: {note}" for system, note in notes.items()), "", "</details>", ""]
    lines += [f"{i}. {s}" for i, s in enumerate(sources, 1)]
    lines += ["", preset_verdict(preset, group).line()]
    return "\n".join(lines)


def collective_tables() -> str:
    """One section per compared preset (file order, rows without one last), after a note
    on bands, roles and tolerances."""
    groups = _groups()
    bands = ", ".join(f"{name} ≤ {tol:.0%}" for name, tol in TOLERANCE.items())
    intro = (
        "Roles: `check` rows are asserted on (tests/test_collective_validation.py), `context` rows "
        "are kept for the record. Bands: small < 1 MiB ≤ medium < 256 MiB ≤ large. Tolerance on "
        f"|predicted/measured − 1| of busbw for `check` rows: {bands}. Model: `clustersim.collectives."
        "bench.measure` on the packet fabric, `auto` algorithm and NCCL protocol, the preset's α, "
        "efficiencies and protocol table (the protocols' latencies and LL128 fraction are calibrated "
        "on the Azure ND A100 v4 curve, so its small/medium rows are the calibration, not checks; "
        "H100's on the Azure ND H100 v5 NVLS curve below 256 MiB, Blackwell's on the Azure ND GB200 v6 "
        f"ring curve below 256 MiB); groups above {MAX_SIMULATED_RANKS} ranks are not simulated."
    )
    return "\n\n".join([intro, *(preset_table(p, g) for p, g in groups.items())])
