"""A timeline of available GPUs drawn from the fleet's failure rates (docs/fleet.md,
"Availability"): what :func:`clustersim.experiments.elastic.elastic` re-lays a job out over.

The rates are those of ``recovery.failures`` (:func:`.rates.job_rates`: a study's and/or
given per-unit MTBFs times the cluster's units). Only the hardware classes
(:data:`.rates.HARDWARE`: gpu, node, nic) take GPUs away: such a failure takes its node
out for ``repair_time``, then the node is back. Each node is an independent alternating
process: in service it fails at ``λ`` = the job's hardware rate / nodes (a GPU's failure
takes its node, so a node's rate is its GPUs', NICs' and own rates together), out it is
repaired in ``R`` = ``repair_time`` and cannot fail again meanwhile. Little's law on the
nodes out, L = (arrival rate of failures) × R with failures arriving at λ·(N − L), gives
the time-average count out L = N·λR / (1 + λR), exact for any R (an alternating renewal
process); N·λR, the M/G/∞ count, is its limit while few nodes are out. Drawn with numpy's
Generator from ``seed`` alone (``recovery.failures.seed`` unless given).

**Failure domains** (``leaf``, ``rack``: :mod:`.domains`): each unit is an alternating
process of its own — failing at its class's rate per unit, out for ``repair_time`` — that
takes all its nodes while out; a node is out while its own process or any of its domains'
is (drawn after the nodes', unit by unit, classes in name order; without domains the draws
and the timeline are exactly those above). The processes are independent, so the
long-run share of a node's time out is 1 − 1/(1 + λR) · Π_d 1/(1 + λ_d R) over its domains
d (each up a share 1/(1 + λ_d R)).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ScenarioError
from ..scenario import load_scenario
from ..topology import build_topology
from .domains import DOMAINS, job_units
from .rates import HARDWARE, check_study, job_rates


def node_failure_rate(sc) -> float:
    """Hardware failures per second of one node of ``sc`` in service (module doc)."""
    return _rates(sc)[0]


def _rates(sc) -> tuple[float, list[tuple[float, tuple[tuple[int, ...], ...]]]]:
    """A node's hardware failure rate, and per failure domain class with a rate (in name
    order) its rate per unit and each unit's nodes (module doc)."""
    spec = sc.recovery.failures
    check_study(spec.study)
    cluster = sc.cluster.model_dump()
    graph = build_topology(cluster)
    counts, members = job_units(cluster, graph, spec.rack_nodes)
    rates = job_rates(spec, counts)
    domains = [(rates[c] / counts[c], members[c]) for c in DOMAINS if c in rates]
    return sum(r for c, r in rates.items() if c in HARDWARE) / sc.cluster.nodes, domains


def availability_from_failures(
    source, horizon_s: float, failures: dict | None = None, seed: int | None = None
) -> list[tuple[float, int]]:
    """The (time s, GPUs) steps of scenario ``source`` (a Scenario, path or dict) over
    ``horizon_s``: every node's GPUs at t = 0, then one row per change (module doc).
    ``failures`` (the fields of ``recovery.failures``) replaces the scenario's own; ``seed``
    its ``seed``. Refused naming the field: no failures, a horizon not finite and > 0,
    a seed not a whole number ≥ 0, a moment when every node is out."""
    sc = _with_failures(load_scenario(source), failures)
    if isinstance(horizon_s, bool) or not (
        isinstance(horizon_s, (int, float)) and math.isfinite(horizon_s) and horizon_s > 0
    ):
        raise ScenarioError("horizon_s", horizon_s, "a finite number of seconds > 0")
    spec = sc.recovery.failures
    seed = spec.seed if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ScenarioError("recovery.failures.seed", seed, "a whole number ≥ 0")
    nodes, gpn = sc.cluster.nodes, sc.cluster.gpus_per_node
    rate, domains = _rates(sc)
    events = _outages(rate, spec.repair_time, nodes, horizon_s, domains, np.random.default_rng(seed))
    rows, out = [(0.0, nodes * gpn)], 0
    for t, step in events:
        out += step
        if out == nodes:
            raise ScenarioError(
                "recovery.failures",
                f"every node out at {t:.0f} s",
                "rates and repair_time that leave a node up",
            )
        if rows[-1][0] == t:  # a return and a failure at one instant: one row
            rows.pop()
        rows.append((t, (nodes - out) * gpn))
    # drop rows that change nothing (a failure exactly at another's return)
    return [r for i, r in enumerate(rows) if i == 0 or r[1] != rows[i - 1][1]]


def _with_failures(sc, failures: dict | None):
    """``sc`` with ``recovery.failures`` = ``failures`` (validated by the scenario's own
    schema, so a bad field is named); ``sc`` itself must have them when none is given."""
    if failures is not None:
        if sc.spec.recovery is None:  # the section needs a job length it does not use here
            return sc.with_overrides({"recovery": {"job_iterations": 1, "failures": failures}})
        return sc.with_overrides({"recovery.failures": failures})
    if sc.spec.recovery is None or sc.recovery.failures is None:
        raise ScenarioError("recovery.failures", None, "give failure rates (a study or mtbf) to draw from")
    return sc


def _outages(
    rate: float, repair_s: float, nodes: int, horizon_s: float, domains, rng
) -> list[tuple[float, int]]:
    """(time, +1 a node goes out / −1 it is back) before ``horizon_s``, sorted; returns
    before failures at one instant. The nodes' draws in node order, then each domain
    unit's (``domains``: per class, its rate per unit and its units' nodes), so a seed fixes
    all; a node out by several at once is out once (module doc)."""
    if repair_s <= 0:
        return []
    down = _intervals(rate, repair_s, nodes, horizon_s, rng)
    if domains:
        for unit_rate, units in domains:
            for unit, spans in zip(
                units, _intervals(unit_rate, repair_s, len(units), horizon_s, rng), strict=True
            ):
                for node in unit:
                    down[node] = down[node] + spans
        down = [_merged(spans) for spans in down]
    events = []
    for spans in down:
        for start, end in spans:
            events.append((start, 1))
            if end < horizon_s:
                events.append((end, -1))
    return sorted(events)


def _intervals(
    rate: float, repair_s: float, units: int, horizon_s: float, rng
) -> list[list[tuple[float, float]]]:
    """Per unit (drawn in order), its (out, back) intervals starting before ``horizon_s``:
    out after an exponential time at ``rate`` in service, back ``repair_s`` later."""
    if rate <= 0:
        return [[] for _ in range(units)]
    out = []
    for _ in range(units):
        t, spans = 0.0, []
        while True:
            t += float(rng.exponential(1.0 / rate))
            if t >= horizon_s:
                break
            spans.append((t, t + repair_s))
            t += repair_s
            if t >= horizon_s:  # no draw past the horizon: a seed's later units keep theirs
                break
        out.append(spans)
    return out


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping or touching intervals joined (a node out by two causes is out once)."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
