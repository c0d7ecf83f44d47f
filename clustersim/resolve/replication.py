"""Which evaluator a resolved Job gets: the DAG pass where no op's time depends on what else
is in flight, and replicated evaluation where an unfolded run's twins are exact twins too.

Pure decisions on the Job (no Program needed), kept below the engine so that the pre-run
estimate (:mod:`.estimate`) prices a run as the evaluator the run gets will run it:
:mod:`clustersim.engine.dag` and :mod:`clustersim.compilers.pipeline.replicas` evaluate what these
functions allow, and ``simulate`` asks them (as the estimate does).
"""

from __future__ import annotations

from ..program import COLLECTIVE, SEND, Program

#: the network models whose sends take a time fixed before the run (``Fabric.fixed_time``)
FIXED_TIME_NETWORKS = ("direct", "analytical")


def contention_free(
    job, program: Program | None, network: str | None = None, collective_model: str | None = None
) -> tuple[bool, str]:
    """Whether the DAG evaluator reproduces the SimPy engine exactly for ``program`` under
    ``job`` (the resolved Job, or anything with its ``cluster`` and ``simulation``), and why;
    ``program`` None: for any Program of the job (as if it held sends and collectives);
    ``network``, ``collective_model``: in place of the job's (the estimate's alternatives).

    Read off the engine: it needs SimPy only where an op's time is not known when it
    starts — a send on the ``packet`` or ``flow`` model (fair shares, queues), or on the
    analytical one inside a link degradation window (the time depends on the start); a
    collective under ``collective_model: fabric`` (point-to-point steps on the network);
    and a compute op under ``comm_compute_slowdown`` > 1 (its rate changes as collectives
    start and end). Compute noise, stragglers and per-GPU speeds are allowed: they are
    per-op factors fixed before the run from the seed, the same in both. (A job with
    faults simulates each of its configurations through ``simulate``, which decides per
    configuration.)"""
    cl, sim = job.cluster, job.simulation
    network = network or sim.network
    collective_model = collective_model or sim.collective_model
    if cl.comm_compute_slowdown != 1.0:
        return False, f"comm_compute_slowdown {cl.comm_compute_slowdown} couples compute to collectives"
    fixed_sends = network in FIXED_TIME_NETWORKS and not (network == "analytical" and cl.link_degradations)
    if not fixed_sends or collective_model != "analytical":  # then it depends on what the Program holds
        kinds = {SEND, COLLECTIVE} if program is None else {op.kind for op in program.ops}
        if SEND in kinds and network not in FIXED_TIME_NETWORKS:
            return False, f"network {network!r} times sends by what shares their links"
        if SEND in kinds and not fixed_sends:
            return False, "link_degradations make a send's time depend on when it starts"
        if COLLECTIVE in kinds and collective_model != "analytical":
            return (
                False,
                f"collective_model {collective_model!r} runs collectives as steps on the network",
            )
    return True, f"contention-free: network {network}, collective_model {collective_model}"


def replica_obstacle(
    job,
    mode_name: str,
    fold: bool | None = None,
    network: str | None = None,
    collective_model: str | None = None,
) -> str | None:
    """Why ``job`` (unfolded) cannot be evaluated as replicas of its folded Program
    (:mod:`clustersim.compilers.pipeline.replicas`), or None; ``mode_name``: the training mode that runs
    it; ``fold``, ``network``, ``collective_model``: in place of the job's settings."""
    if job.fold.enabled if fold is None else fold:
        return "the run is folded"
    if mode_name != "pipeline":
        return f"the {mode_name} mode's Program is not laid out by stage replicas"
    if job.simulation.evaluator == "des":
        return "simulation.evaluator: des"
    if job.parallel.cp > 1:  # the expansion lays twins out as TP ranks of dp replicas
        return "context-parallel ranks are not expanded from a folded run (the ring's sends name other ranks)"
    twins = job.fold_obstacle  # (computed once per Job)
    if twins is not None:
        return f"twins differ: {twins}"
    exact, why = contention_free(job, None, network, collective_model)
    return None if exact else why
