"""Load-time rules of the ``faults`` and ``recovery`` sections (called by scenario.rules).

What can only be known while the job runs (a GPU that already left, an impossible
re-plan) is checked by :mod:`clustersim.faults.timeline` and :mod:`clustersim.faults.replan`
with the same kind of error.
"""

from __future__ import annotations

from ..errors import ScenarioError


def check_fault_rules(spec) -> None:
    """Raise ScenarioError if faults lack a recovery policy or name a GPU that never exists."""
    if spec.faults and spec.recovery is None:
        raise ScenarioError(
            "recovery",
            None,
            "faults need a recovery section, e.g. {policy: checkpoint_restart, "
            "job_iterations: 20, checkpoint_every: 5, storage_bandwidth: 10 GB/s, restart_time: 2 min}",
        )
    if spec.faults and spec.recovery.failures is not None:
        raise ScenarioError(
            "recovery.failures",
            spec.recovery.failures.model_dump(exclude_defaults=True),
            "failures drawn at rates replace the scripted faults list; give one or the other",
        )
    rec = spec.recovery
    if rec is not None and rec.failures is not None and rec.policy == "elastic":
        for name in ("spares", "replacement_time"):
            if getattr(rec.failures, name):
                raise ScenarioError(
                    f"recovery.failures.{name}",
                    getattr(rec.failures, name),
                    "an elastic job continues without the failed node (it returns after "
                    "repair_time); spares and replacement_time belong to checkpoint_restart",
                )
    cl = spec.cluster
    joined = sum(f.nodes for f in spec.faults if f.kind == "node_join")
    total = (cl.nodes + joined) * cl.gpus_per_node
    for k, fault in enumerate(spec.faults):
        if fault.kind == "gpu_fail" and fault.gpu >= total:
            raise ScenarioError(
                f"faults[{k}].gpu",
                fault.gpu,
                f"GPU indices run from 0 to {total - 1} (the cluster's GPUs, then joined nodes')",
            )
    if (spec.faults or spec.recovery is not None) and cl.link_degradations:
        # a job is simulated one configuration at a time, each from t = 0, and its iteration
        # times are laid end to end: windows in absolute simulated seconds would strike
        # every configuration's first iterations instead of the job's clock
        raise ScenarioError(
            "cluster.link_degradations",
            [w.model_dump() for w in cl.link_degradations],
            "degradation windows are times of one simulation; a job with faults or recovery "
            "runs several — use cluster.failed_links or a link_fail fault instead",
        )
    if spec.recovery is not None and spec.recovery.policy == "elastic":
        if spec.parallel.stage_replicas is not None:
            raise ScenarioError(
                "recovery.policy",
                "elastic",
                "elastic re-planning keeps tp × pp and changes dp; "
                "parallel.stage_replicas has no dp to change; accepted: checkpoint_restart",
            )
        if spec.parallel.zero:
            raise ScenarioError(
                "recovery.policy",
                "elastic",
                f"with parallel.zero = {spec.parallel.zero} a failed "
                "GPU's optimizer shard exists nowhere else; accepted: checkpoint_restart (or zero: 0)",
            )
        # a re-plan builds a smaller (or larger) uniform cluster: settings that name GPUs or
        # nodes of the original one, or that split work unevenly, have no meaning on it
        par, cl = spec.parallel, spec.cluster
        for field, value, why in (
            ("cluster.node_groups", cl.node_groups, "mixed node groups"),
            ("parallel.dp_split", None if par.dp_split == "even" else par.dp_split, "an uneven dp_split"),
            (
                "cluster.stragglers",
                cl.stragglers or None,
                "stragglers (they name GPUs of the original cluster)",
            ),
            (
                "cluster.failed_links",
                cl.failed_links or None,
                "failed links (they name links of the original cluster)",
            ),
            ("parallel.parameter_server", par.parameter_server, "parameter-server training"),
        ):
            if value is not None:
                raise ScenarioError(
                    "recovery.policy",
                    "elastic",
                    f"elastic re-planning is not supported with {why} "
                    f"({field}); accepted: checkpoint_restart",
                )
    if (spec.faults or spec.recovery is not None) and spec.training.mode == "inference":
        raise ScenarioError(
            "recovery",
            spec.recovery.model_dump() if spec.recovery else None,
            "faults and recovery model training jobs (checkpoints, lost iterations); "
            "inference scenarios take neither",
        )
