"""Load-time rules of the ``faults`` and ``recovery`` sections (called by scenario.rules).

What can only be known while the job runs (a GPU that already left, an impossible
re-plan) is checked by :mod:`.timeline` and :mod:`.replan` with the same kind of error.
"""

from __future__ import annotations

from ..errors import ScenarioError


def check_fault_rules(spec) -> None:
    """Raise ScenarioError if faults lack a recovery policy or name a GPU that never exists."""
    if spec.faults and spec.recovery is None:
        raise ScenarioError("recovery", None, "faults need a recovery section, e.g. {policy: checkpoint_restart, "
                            "job_iterations: 20, checkpoint_every: 5, storage_bandwidth: 10 GB/s, restart_time: 2 min}")
    cl = spec.cluster
    joined = sum(f.nodes for f in spec.faults if f.kind == "node_join")
    total = (cl.nodes + joined) * cl.gpus_per_node
    for k, fault in enumerate(spec.faults):
        if fault.kind == "gpu_fail" and fault.gpu >= total:
            raise ScenarioError(f"faults[{k}].gpu", fault.gpu,
                                f"GPU indices run from 0 to {total - 1} (the cluster's GPUs, then joined nodes')")
    if spec.recovery is not None and spec.recovery.policy == "elastic":
        if spec.parallel.stage_replicas is not None:
            raise ScenarioError("recovery.policy", "elastic", "elastic re-planning keeps tp × pp and changes dp; "
                                "parallel.stage_replicas has no dp to change; accepted: checkpoint_restart")
        if spec.parallel.zero:
            raise ScenarioError("recovery.policy", "elastic", f"with parallel.zero = {spec.parallel.zero} a failed "
                                "GPU's optimizer shard exists nowhere else; accepted: checkpoint_restart (or zero: 0)")
