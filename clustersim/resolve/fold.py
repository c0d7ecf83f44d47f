"""Symmetry folding of a Job: whether to simulate one representative GPU per pipeline stage.

In a TP × CP × PP × DP job every replica (a CP rank of a data-parallel rank) and every
tensor-parallel rank of a stage runs the same ops at the same times, when the hardware is
uniform. Folding keeps replica 0, TP rank 0 of each stage and drops the others' ops, which
divides the op count by tp × cp × dp. What the dropped twins do to *shared* resources is kept: their pipeline
sends and data-parallel all-reduces still load the fabric as shadow traffic (see
:mod:`clustersim.compilers.pipeline.compile`). Results are reported for every GPU: a folded GPU
shows its representative's row.

Folding is exact when the twins really are twins: one GPU type at one speed, an even
dp_split, no stragglers or noise, no link degradation windows or failed links (they
touch some replicas' routes only), TP groups inside one node (so the dropped TP
collectives use links no one else does), and every twin's sends and data-parallel ring
crossing the same kinds of links as its representative's
(:mod:`clustersim.parallel.fold_routes`). With expert parallelism the representative's
expert collectives (the MoE all-to-alls, the expert gradients' all-reduce) expect one
arrival and carry the stage's other expert groups as shadows; an uneven expert load (the
expert ranks' work or all-to-all bytes differ) is not folded. It is refused otherwise
(each twin's placement is compared by :mod:`clustersim.parallel.fold_routes`) — an explicit
``simulation.fold: true`` is an error naming the reason; ``auto`` quietly runs unfolded and
says why in the summary.

With TP overlap (userbuffers chunks passed around the TP ring) the representative's ring
sends are paired with its own receives, each standing for the previous TP rank's send,
whose route (inside the node) it takes, the stage's other ring hops as shadows
(:attr:`clustersim.compilers.pipeline.passes.SegmentEmitter.folded_ring`): by symmetry
every rank's chunk leaves when the representative's does, so its receive ends when the
unfolded one does.

Context parallelism folds alike: ring attention's sends as a ring of CP ranks
(:attr:`clustersim.compilers.pipeline.passes.SegmentEmitter.folded_cp_ring`), Ulysses'
all-to-alls with the stage's other CP groups as shadows. The CP groups must be laid out
alike, and a ring's hops be of one kind — each rank's step waits on its own receive — unless
every transfer hides behind its chunk on the analytical network
(:mod:`clustersim.resolve.hidden_ring`).

A job of a multi-job run (:class:`Placement`) folds by its own twins on the GPUs it was
placed on — its routes are compared there — and only where no other job's traffic meets its
twins' unlike its representative's (:mod:`clustersim.multijob.shared_links` finds that
reason, which the run hands back as :attr:`clustersim.resolve.Job.fold_refused`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScenarioError
from ..hardware.node_groups import heterogeneity
from ..parallel.fold_routes import twin_obstacle
from ..topology import TOPOLOGIES
from ..topology.plugin import Placements
from .hidden_ring import ring_checked_as_it_runs, ring_hidden

#: ``fold: auto`` folds jobs of at least this many GPUs (below it, unfolded runs are quick
#: and show every GPU's own spans)
AUTO_FOLD_MIN_GPUS = 256


@dataclass(frozen=True)
class Placement:
    """Where a job of a multi-job run sits: ``gpus``, the cluster GPU of each job device."""

    gpus: tuple[int, ...]


@dataclass(frozen=True)
class FoldDecision:
    """Whether to fold, and a one-line account for ``res.summary["folded"]``."""

    enabled: bool
    note: str
    #: a CP ring of mixed hops folded on the understanding that every hop hides: checked
    #: after the run (:func:`clustersim.compilers.pipeline.context_parallel.unhidden_ring`)
    checked_ring: bool = False


def _obstacle(job) -> str | None:
    cl, par = job.cluster, job.parallel
    if job.model.kind == "trace":
        return "a trace model runs every rank its files hold"
    if par.stage_replicas is not None:
        return "stage_replicas makes stages differ"
    if job.fold_refused is not None:
        return job.fold_refused
    if job.num_gpus < cl.num_gpus and job.placement is None:
        return "parallel.gpus leaves part of the cluster out (its routes are not the same for every replica)"
    if job.training.mode == "inference":
        return "inference replicas serve different requests"
    if par.parameter_server is not None:
        return "parameter-server workers are simulated one by one"
    if cl.stragglers:
        return "stragglers make replicas differ"
    mixed = heterogeneity(cl)
    if mixed is not None:
        return f"{mixed} make replicas differ"
    if par.dp_split != "even":
        return "an uneven dp_split makes replicas differ"
    if cl.failed_links:
        return "failed links make replicas' routes differ"
    if job.simulation.compute_noise is not None:
        return "compute noise makes replicas differ"
    if cl.link_degradations:
        return "link degradation windows slow some replicas' links only"
    if par.tp > cl.gpus_per_node or cl.gpus_per_node % par.tp:
        return f"tp = {par.tp} does not fit inside a {cl.gpus_per_node}-GPU node"
    for field in ("gradient_compression", "activation_compression"):
        if getattr(par, field) is not None and getattr(par, field).links != "all":
            return f"{field} on {getattr(par, field).links} links differs between replicas"
    if par.data_parallel is not None and par.data_parallel.shard_group_size:
        return "HSDP shard groups differ between replicas"
    if any(seg.ranks or seg.matrix for c in job.chunk_costs for segs in c.passes.values() for seg in segs):
        return "an uneven expert load makes expert-parallel ranks differ"
    if job.dp * par.cp * par.tp == 1:
        return "nothing to fold (dp = tp = 1)"  # (and cp = 1)
    return None


def fold_obstacle(job) -> str | None:
    """Why folding ``job`` would not be exact (None: it is; the module docstring); the
    routes are compared last (they read the topology graph). A Job computes it once:
    :attr:`clustersim.resolve.Job.fold_obstacle`."""
    return _obstacle(job) or route_obstacle(job)


def decide_fold(job) -> FoldDecision:
    """Apply ``simulation.fold`` (true | false | auto) to a Job."""
    want = job.simulation.fold
    if want is False:
        return FoldDecision(False, "no")
    if want is True:
        why = job.fold_obstacle
        if why is not None:
            raise ScenarioError(
                "simulation.fold", True, f"cannot fold this scenario: {why}; use false or auto"
            )
        return _folded(job)
    if _obstacle(job) is None and job.num_gpus < AUTO_FOLD_MIN_GPUS:
        return FoldDecision(False, f"no (auto folds from {AUTO_FOLD_MIN_GPUS} GPUs)")
    why = job.fold_obstacle
    if why is not None:
        return FoldDecision(False, f"no ({why})")
    return _folded(job)


def _folded(job) -> FoldDecision:
    par = job.parallel
    ring = par.cp > 1 and par.cp_comm_type == "p2p" and ring_checked_as_it_runs(job)
    checked = ring and _routes(job)[1]  # (the routes compared again only where it may be so)
    note = _describe(job) + ("; its CP rings' mixed hops checked to hide as it ran" if checked else "")
    return FoldDecision(True, note, checked)


def _describe(job) -> str:
    kept = (
        "ride with the representative's as one flow per orbit (fold_contention)"
        if job.simulation.fold_contention
        else "kept as shadow traffic"
    )
    par = job.parallel
    cp = f" × cp {par.cp}" if par.cp > 1 else ""
    return (
        f"yes: 1 of {par.tp * par.cp * job.dp} GPUs per stage simulated "
        f"(tp {par.tp}{cp} × dp {job.dp} twins; their sends and DP all-reduces {kept})"
    )


def _split_tp_group(job, where) -> str | None:
    """Why a placed job's TP group spans servers (a placement policy such as ``spread`` puts
    a job's consecutive devices on different servers: its dropped TP collectives would then
    load NICs other jobs share), or None."""
    tp = job.parallel.tp
    for first in range(0, job.num_gpus, tp):
        hosts = {where[f"gpu{d}"][2] for d in range(first, first + tp)}
        if len(hosts) > 1:
            gpus = job.placement.gpus[first : first + tp]
            return f"the TP group on GPUs {list(gpus)} spans {len(hosts)} servers"
    return None


def route_obstacle(job) -> str | None:
    """Why twins' routes differ from their representative's (None if they do not); reads
    the placement the Job's topology graph declares (:attr:`clustersim.resolve.Job.graph`,
    built once per cluster). The first twin that differs, in (stage, replica, TP rank)
    order, is named."""
    return _routes(job)[0]


def _routes(job) -> tuple[str | None, bool]:
    """:func:`route_obstacle`, and whether a CP ring of mixed hops is let through to be
    checked as the run goes (:func:`~.hidden_ring.ring_checked_as_it_runs`)."""
    where = TOPOLOGIES[job.graph.graph["kind"]].placement(job.graph)
    if isinstance(where, str):
        return where, False
    if job.placement is not None:  # job device d sits on cluster GPU gpus[d]
        where = Placements(
            {f"gpu{d}": where[f"gpu{g}"] for d, g in enumerate(job.placement.gpus)},
            getattr(where, "unlike", {}),
        )
        split = _split_tp_group(job, where)
        if split is not None:
            return split, False
    par = job.parallel
    wrap = par.virtual_stages > 1
    # ring attention's ranks each wait on their own receive: the ring's hops must be alike,
    # unless every transfer hides behind its chunk (then each rank runs its chunks back to back)
    cp_ring = par.cp > 1 and par.cp_comm_type == "p2p" and not ring_hidden(job)
    why = twin_obstacle(job.plan, where, wrap=wrap, cp_ring=cp_ring)
    if why is not None and cp_ring and ring_checked_as_it_runs(job):
        if twin_obstacle(job.plan, where, wrap=wrap) is None:  # only the ring's hops differ
            return None, True
    return why, False
