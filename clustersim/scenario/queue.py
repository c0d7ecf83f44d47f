"""A queue scenario: jobs that arrive over time at one cluster (docs/scheduler.md; run by
:mod:`clustersim.scheduler`).

Its ``cluster`` and ``simulation`` are a multi-job scenario's; ``scheduler`` names the
policy (:mod:`clustersim.scheduler.policies`) and where arrival times come from; each job is a multi-job
entry (``model``, ``training``, ``parallel``, ``placement.policy``) plus ``iterations``
(its length), ``priority`` and ``arrival``. Every job is validated at load as a multi-job
scenario of its own on the empty cluster (its errors named ``jobs[k].…``).
"""

from __future__ import annotations

import copy
import csv
import io
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, ValidationError

from ..errors import ScenarioError
from ..reader import check_value, read_text
from .fields import Range, Time, _Spec
from .loader import _to_scenario_error, read_yaml
from .multi_job import MultiJobScenario
from .presets import expand_cluster_preset
from .schema import ClusterSpec, SimulationSpec


class ArrivalsSpec(_Spec):
    """Where arrival times come from: a ``trace`` (CSV with columns ``job``, ``arrival_s``;
    one row per job) or a seeded ``process``: ``poisson`` draws the gaps between the
    jobs' arrivals, in list order, as exponential with mean ``mean_interarrival`` from
    ``simulation.seed``; the first job arrives one gap after t = 0."""

    trace: str | None = None
    process: Literal["poisson"] | None = None
    mean_interarrival: Annotated[Time | None, Range(0, 1e9, open_lo=True)] = None


class SchedulerSpec(_Spec):
    """The queue's policy (``fifo``, ``easy``, ``priority``), ``preemption`` (only with
    ``priority``) and ``arrivals`` (absent: each job's own ``arrival``)."""

    policy: Literal["fifo", "easy", "priority"] = "fifo"
    preemption: bool = False
    arrivals: ArrivalsSpec | None = None


class QueuePlacementSpec(_Spec):
    """How a job is placed when it starts: a policy of multi-job scenarios
    (``packed``, ``spread``, ``per_rail``) on the GPUs free at that moment."""

    policy: Literal["packed", "spread", "per_rail"] = "packed"


class QueueJobSpec(_Spec):
    """One job of the queue: a multi-job entry plus its ``iterations``, ``priority``
    (higher runs first under ``priority``) and ``arrival`` time."""

    name: Annotated[str, Field(min_length=1)]
    model: dict[str, Any]
    training: dict[str, Any]
    parallel: dict[str, Any] = Field(default_factory=dict)
    placement: QueuePlacementSpec = QueuePlacementSpec()
    iterations: Annotated[int, Range(1, 10**9)]
    priority: Annotated[int, Range(-1000, 1000)] = 0
    arrival: Annotated[Time | None, Range(0, 1e9)] = None


class QueueSpec(_Spec):
    """A queue scenario as validated field by field (each job's own sections: later)."""

    name: str = "unnamed"
    cluster: ClusterSpec = ClusterSpec()
    simulation: SimulationSpec = SimulationSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    jobs: Annotated[list[QueueJobSpec], Field(min_length=1)]


class QueueJob:
    """A validated job of the queue: ``gpus`` its GPU count, ``entry`` its multi-job entry
    as written (without placement), for the runs it is part of."""

    __slots__ = ("name", "index", "gpus", "iterations", "priority", "arrival_s", "placement", "entry")

    def __init__(self, index: int, spec: QueueJobSpec, entry: dict, gpus: int, arrival_s: float):
        self.name, self.index, self.entry, self.gpus = spec.name, index, entry, gpus
        self.iterations, self.priority, self.arrival_s = spec.iterations, spec.priority, arrival_s
        self.placement = spec.placement.policy


class QueueScenario:
    """A validated queue scenario (module docstring): ``jobs`` in list order."""

    def __init__(self, source: dict | str | Path):
        raw = read_yaml(source) if isinstance(source, (str, Path)) else source
        check_value(raw)  # bounded before it is copied (the caller's dict is not kept)
        raw = copy.deepcopy(raw)
        if not isinstance(raw, dict):
            raise ScenarioError("scenario", type(raw).__name__, "a mapping with cluster, scheduler and jobs")
        try:
            self.spec = QueueSpec.model_validate(expand_cluster_preset(raw))
        except ValidationError as exc:
            raise _to_scenario_error(exc, QueueSpec) from None
        if self.spec.cluster.node_groups is not None:
            raise ScenarioError(
                "cluster.node_groups", "(set)", "a queue needs one GPU type (drop node_groups)"
            )
        sched = self.spec.scheduler
        if sched.preemption and sched.policy != "priority":
            raise ScenarioError(
                "scheduler.preemption",
                True,
                f"preemption needs policy: priority (the policy is {sched.policy})",
            )
        arrivals = _arrivals(self.spec, raw)
        #: the sections every job's runs share, as written (validated again with each set)
        self._shared = {key: raw[key] for key in ("name", "cluster", "simulation") if key in raw}
        self.jobs: list[QueueJob] = []
        for k, spec in enumerate(self.spec.jobs):
            if any(j.name == spec.name for j in self.jobs):
                raise ScenarioError(f"jobs[{k}].name", spec.name, "each job needs a name of its own")
            entry = {
                key: raw["jobs"][k][key]
                for key in ("name", "model", "training", "parallel")
                if key in raw["jobs"][k]
            }
            gpus = _gpu_count(self._shared, entry, k)
            self.jobs.append(QueueJob(k, spec, entry, gpus, arrivals[k]))

    name = property(lambda self: self.spec.name)
    cluster = property(lambda self: self.spec.cluster)
    policy = property(lambda self: self.spec.scheduler.policy)
    preemption = property(lambda self: self.spec.scheduler.preemption)

    def shared(self, placed: dict[str, tuple[int, ...]]) -> MultiJobScenario:
        """The multi-job scenario of the jobs ``placed`` (name → GPUs), all starting at 0."""
        by_name = {j.name: j for j in self.jobs}
        jobs = [{**by_name[n].entry, "placement": {"gpus": list(g)}} for n, g in sorted(placed.items())]
        return MultiJobScenario({**self._shared, "jobs": jobs})


def _gpu_count(shared: dict, entry: dict, k: int) -> int:
    """The GPU count of job ``k``, checked as a one-job multi-job scenario on the empty
    cluster (placed packed: the single-job run)."""
    try:
        alone = MultiJobScenario({**shared, "jobs": [{**entry, "placement": {"policy": "packed"}}]})
        return len(alone.placement[entry["name"]])
    except ScenarioError as exc:
        field = exc.field.removeprefix("jobs[0].")
        if field.partition(".")[0] not in ("cluster", "simulation"):  # the shared sections: no job's
            field = f"jobs[{k}].{field}"
        raise ScenarioError(field, exc.value, exc.expected) from None


def _arrivals(spec: QueueSpec, raw: dict) -> list[float]:
    """Each job's arrival time in seconds, from the jobs, a trace or the seeded process."""
    arr = spec.scheduler.arrivals
    given = [k for k, j in enumerate(spec.jobs) if j.arrival is not None]
    if arr is None:
        if len(given) < len(spec.jobs):
            k = next(k for k, j in enumerate(spec.jobs) if j.arrival is None)
            raise ScenarioError(
                f"jobs[{k}].arrival", None, "an arrival time (or scheduler.arrivals: a trace or a process)"
            )
        return [float(j.arrival) for j in spec.jobs]
    if given:
        raise ScenarioError(
            f"jobs[{given[0]}].arrival",
            raw["jobs"][given[0]].get("arrival"),
            "no arrival of its own: scheduler.arrivals sets every job's",
        )
    if (arr.trace is None) == (arr.process is None):
        raise ScenarioError(
            "scheduler.arrivals", raw["scheduler"]["arrivals"], "either trace or process, not both"
        )
    if arr.process is not None:
        if arr.mean_interarrival is None:
            raise ScenarioError(
                "scheduler.arrivals.mean_interarrival", None, "the mean gap of the poisson process"
            )
        gaps = np.random.default_rng(spec.simulation.seed).exponential(arr.mean_interarrival, len(spec.jobs))
        return [float(t) for t in np.cumsum(gaps)]
    if arr.mean_interarrival is not None:
        raise ScenarioError(
            "scheduler.arrivals.mean_interarrival", arr.mean_interarrival, "only with process"
        )
    return _trace(arr.trace, [j.name for j in spec.jobs])


def _trace(path: str, names: list[str]) -> list[float]:
    """The ``arrival_s`` of each job named in the CSV trace at ``path`` (one row per job)."""
    field = "scheduler.arrivals.trace"
    rows = list(csv.DictReader(io.StringIO(read_text(path, field))))
    if not rows or set(rows[0]) != {"job", "arrival_s"}:
        raise ScenarioError(field, path, "a CSV with a header job,arrival_s and one row per job")
    times: dict[str, float] = {}
    for n, row in enumerate(rows, start=2):
        name, value = row["job"], row["arrival_s"]
        if name not in names:
            raise ScenarioError(field, path, f"line {n}: job {name!r} is not one of the jobs {names}")
        if name in times:
            raise ScenarioError(field, path, f"line {n}: job {name!r} arrives twice (one row per job)")
        try:
            t = float(value)
        except (TypeError, ValueError):
            t = -1.0
        if not 0 <= t <= 1e9:
            raise ScenarioError(field, path, f"line {n}: arrival_s {value!r} is not a time from 0 to 1e9 s")
        times[name] = t
    missing = [n for n in names if n not in times]
    if missing:
        raise ScenarioError(field, path, f"a row for every job; {missing[0]!r} has none")
    return [times[n] for n in names]


__all__ = ["QueueScenario", "QueueSpec"]
