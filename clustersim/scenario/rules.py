"""Cross-field rules of a scenario: what must hold between sections.

Field-level checks live in the schema; these need two or more fields at once (the plan
must cover the GPUs exactly, the batch must split into micro-batches, the layers into
stages). Each rule raises :class:`ScenarioError` naming the field a user should change.
"""

from __future__ import annotations

import warnings

from ..errors import ScenarioError, ScenarioWarning
from ..schedules import SCHEDULES
from ..schedules.orders import stage_order
from ..schedules.registry import replicable_schedules
from ..topology.registry import typed_options
from ..workload.rules import check_model_rules, model_layers
from ..workload.tp_overlap import check_tp_overlap
from .context_parallel_rules import check_context_parallel
from .expert_rules import check_expert_parallel
from .fault_rules import check_fault_rules
from .hetero_rules import check_dp_split, check_node_groups
from .partition_rules import check_partition
from .schema import ScenarioSpec


def job_gpus(spec: ScenarioSpec) -> int:
    """The GPUs the job runs on: ``parallel.gpus``, else every GPU of the cluster."""
    return spec.parallel.gpus or spec.cluster.num_gpus


def resolve_dp(spec: ScenarioSpec) -> int:
    """The data-parallel degree: explicit, or the job's GPUs / (tp × cp × pp) when ``auto``."""
    n, tp, pp, cp = job_gpus(spec), spec.parallel.tp, spec.parallel.pp, spec.parallel.cp
    if spec.parallel.stage_replicas is not None:  # replication is per stage: no uniform dp
        return 1
    if spec.parallel.dp != "auto":
        return spec.parallel.dp
    if n % (tp * pp * cp):
        names, values = ("tp × cp × pp", f"{tp} × {cp} × {pp}") if cp > 1 else ("tp × pp", f"{tp} × {pp}")
        # dp left unstated: the degree the user wrote is the one to change
        stated = spec.parallel.model_fields_set
        degree = next((k for k in ("cp", "pp", "tp") if k in stated and getattr(spec.parallel, k) > 1), None)
        raise ScenarioError(
            "parallel.dp" if "dp" in stated or degree is None else f"parallel.{degree}",
            "auto" if "dp" in stated or degree is None else getattr(spec.parallel, degree),
            f"the job's {n} GPUs do not divide by {names} = {values}; change tp/pp, parallel.gpus "
            "or the cluster",
        )
    return n // (tp * pp * cp)


def check_rules(spec: ScenarioSpec) -> None:
    """Raise ScenarioError for the first cross-field rule the scenario breaks."""
    n, par = spec.cluster.num_gpus, spec.parallel
    spec.cluster.check_gpu_name()
    check_node_groups(spec)  # first: the GPU count below depends on it
    from .inference import check_inference
    from .rlhf_rules import check_rlhf

    check_rlhf(spec)  # (first: an rlhf scenario's generation section is named as the rlhf's)
    check_inference(spec)
    for k, straggler in enumerate(spec.cluster.stragglers):
        for g in straggler.gpus:
            if not 0 <= g < n:
                raise ScenarioError(f"cluster.stragglers[{k}].gpus", g, f"GPU indices run from 0 to {n - 1}")
    if spec.cluster.link_degradations and (
        spec.simulation.network == "direct" or spec.simulation.collective_model == "analytical"
    ):
        raise ScenarioError(
            "cluster.link_degradations",
            len(spec.cluster.link_degradations),
            "windows act on topology links in time: they need simulation.network packet, flow "
            "or analytical and simulation.collective_model fabric",
        )
    check_fault_rules(spec)
    nic = spec.cluster.nic
    if nic.per_node is not None and nic.per_node > spec.cluster.gpus_per_node:
        raise ScenarioError(
            "cluster.nic.per_node",
            nic.per_node,
            f"at most gpus_per_node ({spec.cluster.gpus_per_node}) NICs per node",
        )
    typed_options(spec.cluster.model_dump(), "cluster")  # refused at load, also where no graph is built
    if spec.cluster.nodes > 1 and spec.cluster.topology.get("kind") == "single_node":
        raise ScenarioError(
            "cluster.topology.kind",
            "single_node",
            f"a cluster of {spec.cluster.nodes} nodes needs a multi-node topology (e.g. fat_tree)",
        )
    if par.stage_replicas is not None:
        check_stage_replicas(spec)
    if par.gpus is not None and par.gpus > n:
        raise ScenarioError("parallel.gpus", par.gpus, f"at most the cluster's {n} GPUs")
    dp = resolve_dp(spec)
    used = job_gpus(spec)
    if par.stage_replicas is None and par.tp * par.cp * par.pp * dp != used:
        whose = (
            f"the job's {used} GPUs (parallel.gpus)"
            if par.gpus
            else (f"the cluster's {n} GPUs (nodes × gpus_per_node; set parallel.gpus to use fewer)")
        )
        cp = f" cp={par.cp}" if par.cp > 1 else ""
        raise ScenarioError(
            "parallel",
            f"tp={par.tp}{cp} pp={par.pp} dp={dp}",
            f"tp × {'cp × ' if cp else ''}pp × dp must equal {whose}",
        )
    check_context_parallel(spec)
    if par.tp > 1 and spec.model.kind == "synthetic":
        raise ScenarioError(
            "parallel.tp",
            par.tp,
            "a synthetic model has per-GPU layer times and cannot be split by tensor parallelism; accepted: 1",
        )
    if spec.model.kind == "trace":
        for key in ("tp", "pp", "cp"):
            if getattr(par, key) > 1:
                raise ScenarioError(
                    f"parallel.{key}",
                    getattr(par, key),
                    "a trace model (model.kind: trace) brings its own parallelism; accepted: 1",
                )
    if par.tp > 1 and spec.model.kind == "cnn":
        raise ScenarioError(
            "parallel.tp", par.tp, "CNN models run data and pipeline parallel only; accepted: 1"
        )
    check_model_rules(spec)
    check_tp_overlap(spec)
    check_expert_parallel(spec, dp)
    layers = model_layers(spec.model)
    if spec.model.kind == "cnn" and layers < par.pp * par.virtual_stages:
        raise ScenarioError(
            "parallel.pp",
            par.pp,
            f"model {spec.model.preset} has {layers} partitionable "
            f"layers; accepted: pp × virtual_stages ≤ {layers}",
        )
    check_partition(spec, layers)
    tr = spec.training
    if par.dp_split == "even":
        if tr.global_batch % (tr.micro_batch * dp):
            raise ScenarioError(
                "training.global_batch",
                tr.global_batch,
                f"must be a multiple of micro_batch × dp = {tr.micro_batch} × {dp} = {tr.micro_batch * dp}",
            )
        counts = [tr.global_batch // (tr.micro_batch * dp)]
    else:
        counts = check_dp_split(spec, dp)  # micro-batches per replica (``speed``: checked when split)
    for m in counts:
        try:
            SCHEDULES[par.schedule].validate(par.pp, m, par.virtual_stages)  # e.g. interleaved: m % pp == 0
        except ScenarioError as exc:
            raise _at_schedule(par, exc) from None
    if spec.model.kind == "synthetic" and spec.model.backward_weight == 0 and _splits_backward(par):
        warnings.warn(
            ScenarioWarning(
                "model.backward_weight",
                0,
                f"leaves schedule {par.schedule!r} no weight-gradient (W) work to move into the "
                "bubbles, so it runs as a plain backward (the same times as 1f1b); give the W part of "
                "model.backward, e.g. backward_weight = backward / 2",
            ),
            stacklevel=2,
        )
    if spec.model.kind == "synthetic" and spec.model.backward_weight > spec.model.backward:
        raise ScenarioError(
            "model.backward_weight",
            spec.model.backward_weight,
            f"the weight-gradient part cannot exceed the whole backward ({spec.model.backward} s)",
        )


def _at_schedule(par, exc: ScenarioError) -> ScenarioError:
    """A schedule's refusal ``exc`` of a ``parallel`` field the scenario left at its default
    (pp 1 for DualPipe, one chunk per stage for interleaved) re-aimed at ``parallel.schedule``,
    the field the user wrote that asks for another value."""
    field = exc.field.removeprefix("parallel.")
    if field == exc.field or field == "schedule" or field in par.model_fields_set:
        return exc
    why = f"{exc.expected} (parallel.{field} unstated: {exc.value})"
    return ScenarioError("parallel.schedule", par.schedule, why)


def check_stage_replicas(spec: ScenarioSpec) -> None:
    """The shape of a ``parallel.stage_replicas`` job (PipeDream's per-stage replication,
    e.g. 15-1): one entry per stage, summing to the job's GPUs (the replica layout is built
    from it), and one model chunk per stage without tensor parallelism (what the partition
    and schedule rules below read). What else it cannot combine with is the stage-replicated
    compiler's check (:mod:`clustersim.compilers.replicated.check`)."""
    n, par = job_gpus(spec), spec.parallel
    reps = par.stage_replicas
    if len(reps) != par.pp or sum(reps) != n:
        raise ScenarioError(
            "parallel.stage_replicas",
            reps,
            f"give the GPUs of each of the pp = {par.pp} stages, summing to the "
            f"{'job' if par.gpus else 'cluster'}'s {n} GPUs",
        )
    if par.tp != 1:
        raise ScenarioError(
            "parallel.tp", par.tp, "stage_replicas runs without tensor parallelism; accepted: 1"
        )
    sch = SCHEDULES[par.schedule]  # (first: a schedule's own chunk count fills virtual_stages)
    if sch.chunks != 1 or sch.placement != "loop":
        raise ScenarioError(
            "parallel.schedule",
            par.schedule,
            f"stage_replicas needs a schedule with one model chunk per stage; accepted: "
            f"{', '.join(replicable_schedules())}",
        )
    if par.virtual_stages != 1:
        raise ScenarioError(
            "parallel.virtual_stages",
            par.virtual_stages,
            "stage_replicas runs one model chunk per stage; accepted: 1",
        )


def _splits_backward(par) -> bool:
    """Whether the schedule's order splits a backward into B and W (the zero-bubble family)."""
    sched = SCHEDULES[par.schedule]
    # the last stage at 2·pp micro-batches (a count every schedule accepts): a W split shows
    # there whatever the run's m, and the probe's work stays small at load
    order = stage_order(sched, par.pp - 1, par.pp, 2 * par.pp, par.virtual_stages, 1 if sched.flush else 2)
    return any(ph == "W" for ph, _, _ in order)
