"""Several training jobs on one cluster: the ``jobs`` scenario (docs/multi_job.md).

A multi-job scenario has one ``cluster`` and ``simulation`` and a list of ``jobs``, each
with its own ``model``, ``training`` and ``parallel`` sections, a ``placement`` (which GPUs
of the cluster it runs on) and a ``start`` time. Each job is validated as a scenario of its
own (its errors are named ``jobs[k].…``) on the cluster's first ``n`` GPUs, ``n`` its GPU
count; :mod:`clustersim.multijob` moves each job's Program onto its placed GPUs, merges
them and runs them together on the shared fabric.

Placement is fixed at load, job by job in list order, each from the GPUs no earlier job
took: an explicit ``gpus`` list or range string, or a policy that sorts the free GPUs and
takes the first ``n`` (GPU ``g`` sits on node ``g // gpus_per_node`` at local index
``g % gpus_per_node``):

* ``packed`` — by GPU index: whole nodes, consecutive, one after another;
* ``spread`` — round robin over nodes: each node's first free GPU, in node order, then
  each node's second free GPU, …;
* ``per_rail`` — rail by rail: local index 0 (rail 0) on every node in node order, then
  local index 1, … (on a rail-optimised fabric each rail is one switch).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from ..errors import ScenarioError
from ..reader import check_value
from .fields import Range, Time, _Spec
from .loader import _to_scenario_error, apply_overrides
from .presets import expand_cluster_preset
from .schema import ClusterSpec, SimulationSpec

POLICIES = ("packed", "spread", "per_rail")


class PlacementSpec(_Spec):
    """Where a job runs: ``gpus`` (a list of GPU indices or a range string such as
    ``"0-7,16-23"``) or a ``policy`` (module docstring); default ``packed``."""

    gpus: str | list[int] | None = None
    policy: Literal["packed", "spread", "per_rail"] | None = None


class JobEntrySpec(_Spec):
    """One job of a multi-job scenario. ``model``, ``training`` and ``parallel`` are the
    single-job sections (validated as a scenario of their own); ``start``: seconds after
    t = 0 at which the job's first op may begin."""

    name: Annotated[str, Field(min_length=1)]
    model: dict[str, Any]
    training: dict[str, Any]
    parallel: dict[str, Any] = Field(default_factory=dict)
    placement: PlacementSpec = PlacementSpec()
    start: Annotated[Time, Range(0, 1e7)] = 0.0


class MultiJobSpec(_Spec):
    """A multi-job scenario as validated field by field (the jobs' own sections: later)."""

    name: str = "unnamed"
    cluster: ClusterSpec = ClusterSpec()
    simulation: SimulationSpec = SimulationSpec()
    jobs: Annotated[list[JobEntrySpec], Field(min_length=1)]


class MultiJobScenario:
    """A validated multi-job scenario: ``jobs`` maps each job's name to its own
    :class:`~clustersim.scenario.Scenario` (on the cluster's first n GPUs), ``placement``
    to the cluster GPUs it runs on (device d of the job is GPU ``placement[name][d]``),
    ``start`` to its start time in seconds."""

    __slots__ = ("_raw", "spec", "jobs", "placement", "start")

    def __init__(self, raw: dict[str, Any]):
        from . import Scenario  # the package's single-job Scenario (defined beside this module)

        self._raw = raw
        check_value(raw)
        try:
            self.spec = MultiJobSpec.model_validate(expand_cluster_preset(raw))
        except ValidationError as exc:
            raise _to_scenario_error(exc, MultiJobSpec) from None
        cl = self.spec.cluster
        if cl.node_groups is not None:
            raise ScenarioError(
                "cluster.node_groups", "(set)", "a multi-job scenario needs one GPU type (drop node_groups)"
            )
        self.jobs: dict[str, Scenario] = {}
        self.placement: dict[str, tuple[int, ...]] = {}
        self.start: dict[str, float] = {}
        owner: dict[int, str] = {}
        for k, entry in enumerate(self.spec.jobs):
            if entry.name.isdigit():  # ``--set jobs.N.field`` takes N as an index
                raise ScenarioError(
                    f"jobs[{k}].name",
                    entry.name,
                    "a name with a letter in it (digits alone address jobs by index)",
                )
            if entry.name in self.jobs:
                raise ScenarioError(f"jobs[{k}].name", entry.name, "each job needs a name of its own")
            gpus = _place(entry, k, raw["jobs"][k], cl, owner)
            for g in gpus:
                owner[g] = entry.name
            one = {
                "name": entry.name,
                "cluster": raw.get("cluster", {}),
                "simulation": raw.get("simulation", {}),
                "model": entry.model,
                "training": entry.training,
                "parallel": {**entry.parallel, "gpus": len(gpus)},
            }
            try:
                self.jobs[entry.name] = Scenario(one)
            except ScenarioError as exc:
                raise job_error(k, exc) from None
            _check_compression(self.jobs[entry.name], k)
            self.placement[entry.name] = gpus
            self.start[entry.name] = entry.start

    name = property(lambda self: self.spec.name)
    cluster = property(lambda self: self.spec.cluster)
    simulation = property(lambda self: self.spec.simulation)
    model = property(lambda self: _per_job("model"))
    training = property(lambda self: _per_job("training"))
    parallel = property(lambda self: _per_job("parallel"))
    faults = property(lambda self: _per_job("faults"))
    recovery = property(lambda self: _per_job("recovery"))

    @property
    def num_gpus(self) -> int:
        """The GPUs the jobs run on together."""
        return sum(len(g) for g in self.placement.values())

    def with_overrides(self, overrides: dict[str, Any]) -> MultiJobScenario:
        """A new scenario with dotted keys replaced, e.g. ``{"cluster.topology.oversubscription": 1}``."""
        return MultiJobScenario(apply_overrides(self._raw, overrides))

    def resolved(self) -> dict[str, Any]:
        """Every field with defaults filled: cluster and simulation once, then per job its
        resolved sections, placement (GPU list) and start."""
        out = self.spec.model_dump(mode="json", exclude={"jobs"})
        out["jobs"] = []
        for name, sc in self.jobs.items():
            one = sc.resolved()
            out["jobs"].append(
                {
                    "name": name,
                    **{key: one[key] for key in ("model", "training", "parallel")},
                    "placement": {"gpus": list(self.placement[name])},
                    "start": self.start[name],
                }
            )
        return out

    def __repr__(self) -> str:
        jobs = ", ".join(f"{n}: {len(g)} GPUs" for n, g in self.placement.items())
        return f"MultiJobScenario({self.name!r}, {jobs})"


def _per_job(section: str):
    """What a tool that reads one job's ``section`` gets from a multi-job scenario: an error
    for the user (only ``simulate`` / ``clustersim run`` take several jobs)."""
    raise ScenarioError(
        section,
        None,
        "a multi-job scenario has no top-level section of its own here (each of its jobs has one); "
        "it runs with simulate / clustersim run — to plan, search or sweep a job, give it as a scenario of its own",
    )


def _place(entry: JobEntrySpec, k: int, raw: dict, cluster: ClusterSpec, owner: dict[int, str]) -> tuple:
    """The cluster GPUs job ``k`` runs on (module docstring), refusing GPUs outside the
    cluster and GPUs an earlier job holds (naming both jobs)."""
    total, field = cluster.num_gpus, f"jobs[{k}].placement"
    place = entry.placement
    if place.gpus is not None and place.policy is not None:
        raise ScenarioError(field, raw.get("placement"), "give either gpus or policy, not both")
    if place.gpus is not None:
        gpus = _gpu_list(place.gpus, f"{field}.gpus", total)
        taken = [g for g in gpus if g in owner]
        if taken:
            raise ScenarioError(
                f"{field}.gpus",
                place.gpus,
                f"job {entry.name!r} overlaps job {owner[taken[0]]!r} on GPU {taken[0]} "
                f"({len(taken)} GPUs shared); placements must be disjoint",
            )
        want = entry.parallel.get("gpus")
        if want is not None and want != len(gpus):
            raise ScenarioError(f"jobs[{k}].parallel.gpus", want, f"the placement lists {len(gpus)} GPUs")
        return gpus
    n = _gpu_count(entry, k)
    free = [g for g in range(total) if g not in owner]
    if n > len(free):
        raise ScenarioError(
            f"jobs[{k}].parallel.gpus", n, f"only {len(free)} of the cluster's {total} GPUs are left free"
        )
    return place_by_policy(place.policy, n, free, cluster.gpus_per_node)


def place_by_policy(policy: str | None, n: int, free: list[int], per: int) -> tuple[int, ...]:
    """The ``n`` GPUs a placement ``policy`` (module docstring; None: ``packed``) takes from
    the ``free`` GPUs (ascending) of a cluster with ``per`` GPUs a node, sorted."""
    free = list(free)
    if policy == "spread":
        slot = {g: sum(1 for f in free if f // per == g // per and f < g) for g in free}
        free.sort(key=lambda g: (slot[g], g // per))
    elif policy == "per_rail":
        free.sort(key=lambda g: (g % per, g // per))
    return tuple(sorted(free[:n]))


def job_error(k: int, exc: ScenarioError) -> ScenarioError:
    """``exc``, raised for job ``k`` checked as a scenario of its own, naming its field as
    ``jobs[k].…`` (by the loader, and by its compiler's check when the jobs run)."""
    return ScenarioError(f"jobs[{k}].{exc.field}", exc.value, exc.expected)


def _check_compression(sc, k: int) -> None:
    """Compression domains (``links`` other than ``all``) are read off the topology where the
    job compiles — the cluster's first n GPUs, not its placed ones — so they are refused."""
    for what in ("gradient_compression", "activation_compression"):
        spec = getattr(sc.parallel, what)
        if spec is not None and spec.links != "all":
            raise ScenarioError(
                f"jobs[{k}].parallel.{what}.links",
                spec.links,
                "a job of a multi-job scenario compresses on all links only (its domains would be "
                "read where it compiles, on the cluster's first GPUs, not where it is placed)",
            )


def _gpu_count(entry: JobEntrySpec, k: int) -> int:
    """A job placed by policy: ``parallel.gpus``, else tp × cp × pp × dp with an integer dp."""
    par = entry.parallel
    if par.get("gpus") is not None:
        return int(par["gpus"])
    dp = par.get("dp", "auto")
    if isinstance(dp, int) and not isinstance(dp, bool):
        return int(par.get("tp", 1)) * int(par.get("cp", 1)) * int(par.get("pp", 1)) * dp
    raise ScenarioError(
        f"jobs[{k}].parallel.gpus",
        None,
        "a job placed by policy needs its GPU count: set parallel.gpus, an integer parallel.dp, "
        "or placement.gpus",
    )


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def _gpu_list(value: str | list[int], field: str, total: int) -> tuple[int, ...]:
    """``[0, 1, 5]`` or ``"0-3,8-11"`` as a sorted tuple of distinct GPU indices in 0..total-1."""
    if isinstance(value, str):
        out: list[int] = []
        for part in value.split(","):
            m = _RANGE.match(part)
            if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
                raise ScenarioError(field, value, "expected GPU indices and ranges such as '0-7,16-23'")
            out += range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1)
    else:
        out = list(value)
    if not out or len(set(out)) != len(out):
        raise ScenarioError(field, value, "expected at least one GPU, each listed once")
    bad = [g for g in out if not 0 <= g < total]
    if bad:
        raise ScenarioError(field, value, f"GPU {bad[0]} is not in the cluster (GPUs 0 to {total - 1})")
    return tuple(sorted(out))


__all__ = ["MultiJobScenario", "MultiJobSpec", "POLICIES", "place_by_policy"]
