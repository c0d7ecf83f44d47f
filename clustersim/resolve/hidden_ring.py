"""Whether ring attention's transfers hide behind its chunks on every CP rank, so that a CP
ring of mixed hops still folds exactly (:mod:`clustersim.resolve.fold`).

A folded CP ring gives every rank the representative's times. That is exact by symmetry
where every rank receives over the same kind of hop (:mod:`clustersim.parallel.fold_routes`);
a ring with two or more ranks per server, or crossing a leaf border once, mixes NVLink,
leaf and spine hops, and its ranks wait on receives of different lengths. Step i of a rank
starts when its step i − 1's chunk has ended and its receive has arrived
(:mod:`clustersim.compilers.pipeline.context_parallel`); where every hop's transfer of step
i's bytes takes no longer than step i's chunk, the receive is always in before the chunk
ends, so every rank runs its steps back to back from the same start — each rank's times are
the representative's whatever hop it receives over, and folding stays exact.

That can be known before the run only where a transfer's time is fixed by its route: the
``analytical`` network (``Σ latency + bytes / bottleneck``, the engine's own formula, on
the route the engine takes; a slower compute only hides a transfer better). On ``flow`` and
``packet`` a transfer's time depends on what shares its links. On ``flow`` under
``fold_contention`` (``balanced``) a mixed ring folds on trust and is checked as the run
goes (:func:`ring_checked_as_it_runs`): the engine keeps when each hop of every ring of the
stage lands (the mixed hops are flows of their own, their orbit being asymmetric), and
after the run every hop must have landed by the time the op waiting on its receive could
otherwise have started (:func:`clustersim.compilers.pipeline.context_parallel.unhidden_ring`)
— then the folded run is the unfolded one; where one did not, ``fold: true`` is refused
naming the hop, and ``auto`` runs the job again unfolded. On ``packet`` a mixed ring is
refused.
"""

from __future__ import annotations

from ..topology.routing import Router


def ring_checked_as_it_runs(job) -> bool:
    """Whether a CP ring of mixed hops may fold to be checked after the run (module
    docstring): the flow network with ``fold_contention``, no degradation windows."""
    return (
        job.simulation.network == "flow"
        and job.simulation.fold_contention
        and not job.cluster.link_degradations
    )


def ring_hidden(job) -> bool:
    """Whether every ring step's transfer, over every hop of every stage's CP ring, takes no
    longer than the step's chunk (module docstring)."""
    if job.simulation.network != "analytical" or job.cluster.link_degradations:
        return False
    steps = {
        (chunk, nbytes)
        for c in job.chunk_costs
        for segs in c.passes.values()
        for seg in segs
        if seg.kind == "ring"
        for chunk, nbytes in zip(seg.steps, seg.step_bytes)
        if nbytes
    }
    costs = _hop_costs(job)
    return all(
        latency + nbytes / bandwidth <= chunk for chunk, nbytes in steps for latency, bandwidth in costs
    )


def _hop_costs(job) -> set[tuple[float, float]]:
    """(latency, bottleneck bandwidth) of every hop of each stage's first CP ring, on the
    GPUs the job was placed on."""
    plan, router = job.plan, Router(job.graph)
    rings = {plan.cp_ring(s, 0, 0) for s in range(plan.pp)}
    at = job.placement.gpus if job.placement is not None else range(job.num_gpus)  # (a multi-job run's)
    hops = {(f"gpu{at[r[c - 1]]}", f"gpu{at[r[c]]}") for r in rings for c in range(plan.cp)}
    return {router.cost(a, b) for a, b in hops}


def hop_kinds(job) -> int:
    """How many kinds of hop (by route latency and bottleneck bandwidth) a stage's CP rings
    mix: each kind one orbit of a folded ring checked as it runs (the estimate counts them)."""
    return len(_hop_costs(job))
