"""Cross-field rules of heterogeneous clusters: ``cluster.node_groups`` and ``parallel.dp_split``.

Called by :func:`clustersim.scenario.rules.check_rules`; each rule raises a
:class:`ScenarioError` naming the field to change (docs/heterogeneous.md).
"""

from __future__ import annotations

from ..errors import ScenarioError
from ..hardware.node_groups import gpu_types, heterogeneity
from ..schedules import SCHEDULES


def check_node_groups(spec) -> None:
    """The groups must cover the cluster's nodes; a TP group must not mix GPU types (a
    replicated stage: :mod:`clustersim.compilers.replicated.check`)."""
    cl, par = spec.cluster, spec.parallel
    if cl.node_groups is None:
        return
    total = sum(g.nodes for g in cl.node_groups)
    if total != cl.nodes:
        raise ScenarioError(
            "cluster.nodes",
            cl.nodes,
            f"node_groups hold {total} nodes; accepted: {total} "
            f"(or leave cluster.nodes out and it is their sum)",
        )
    if len(gpu_types(cl)) > 1 and (par.tp > cl.gpus_per_node or cl.gpus_per_node % par.tp):
        raise ScenarioError(
            "parallel.tp",
            par.tp,
            f"with {heterogeneity(cl)} a tensor-parallel group must sit "
            f"inside one node (one GPU type); accepted: a divisor of gpus_per_node = "
            f"{cl.gpus_per_node}",
        )


def microbatch_total(spec, dp: int) -> int:
    """Micro-batches of one iteration over all replicas (global_batch / micro_batch), checked
    for an uneven ``parallel.dp_split``."""
    tr, split = spec.training, spec.parallel.dp_split
    if tr.global_batch % tr.micro_batch:
        raise ScenarioError(
            "training.global_batch", tr.global_batch, f"must be a multiple of micro_batch = {tr.micro_batch}"
        )
    total = tr.global_batch // tr.micro_batch
    if total < dp:
        raise ScenarioError(
            "training.global_batch",
            tr.global_batch,
            f"dp_split needs at least one micro-batch "
            f"per replica; accepted: ≥ micro_batch × dp = {tr.micro_batch * dp}",
        )
    if isinstance(split, list) and (len(split) != dp or sum(split) != total):
        raise ScenarioError(
            "parallel.dp_split",
            split,
            f"give the micro-batches of each of the dp = {dp} "
            f"replicas, summing to global_batch / micro_batch = {total}",
        )
    return total


def check_dp_split(spec, dp: int) -> list[int]:
    """Rules of an uneven ``parallel.dp_split``; returns the micro-batch counts the schedule must
    accept now (the listed ones; ``speed`` is split, and checked, at compile time)."""
    par = spec.parallel
    if par.stage_replicas is not None:
        raise ScenarioError(
            "parallel.dp_split",
            par.dp_split,
            "stage_replicas sets its own replication; accepted with it: even",
        )
    if not SCHEDULES[par.schedule].flush:
        flushing = ", ".join(name for name, s in SCHEDULES.items() if s.flush)
        raise ScenarioError(
            "parallel.schedule",
            par.schedule,
            f"an uneven dp_split needs a flushing schedule "
            f"(replicas meet at one all-reduce per iteration); accepted: {flushing}",
        )
    microbatch_total(spec, dp)
    if par.dp_split == "speed":
        _check_speed_split(par, SCHEDULES[par.schedule])
    return list(par.dp_split) if isinstance(par.dp_split, list) else []


def _check_speed_split(par, schedule) -> None:
    """``speed`` may give a replica any number of micro-batches, so the schedule must take
    every count: probing 1 … pp finds a schedule that takes only some (interleaved: m a
    multiple of pp) now rather than when the split is computed in ``simulate``."""
    for m in range(1, par.pp + 1):
        try:
            schedule.validate(par.pp, m, par.virtual_stages)
        except ScenarioError as exc:
            raise ScenarioError(
                "parallel.dp_split",
                "speed",
                f"speed picks each replica's micro-batch count, but schedule {par.schedule!r} "
                f"takes only some counts ({exc.expected}); use dp_split even or a list of counts it takes",
            ) from None
