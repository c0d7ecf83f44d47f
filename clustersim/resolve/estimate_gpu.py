"""One GPU's work in the pre-run estimate (:mod:`.estimate`): the ops, simulated events and
CPU weight of a pass and of an optimizer step on one GPU of a stage, each collective over
its own group (TP, CP, an expert group, the data-parallel group) priced by
:class:`.estimate_comm.Collectives` as the run will run it.

A member of a collective holds 1/n of its messages; a folded representative holds all of
them and those of the groups it stands for (their shadows). A collective the run times by
its α-β form (``collective_model: analytical``, or a group inside one host's private links on
``flow``) is three events a call, 3/n a member (and :data:`SLOWDOWN_EVENTS` more per member
where communication slows compute). A Program's send costs its message's events (on a
fixed-time fabric the one timeout it holds its lane for), its recv none. A ``flow`` collective's events weigh more where its
bandwidth-bound messages and its stage's groups beside it keep many flows in flight
(:data:`FLOW_GROUP`): each of their events re-solves more shares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..parallel.data_parallel import SCALAR_BYTES, buckets, grad_stats_group
from ..workload.pass_costs import pass_segments, pass_transfers
from ..workload.stage_cost import Segment
from ..workload.tp_overlap import BULK, RING
from .estimate_comm import LOAD_EVENTS, LOAD_WEIGHT, Collectives, message_events
from .hidden_ring import hop_kinds

#: events a collective op adds where communication slows compute (cluster.comm_compute_slowdown):
#: the re-timing of the compute running beside it (measured on DeepSeek-V3, 2,048 GPUs)
SLOWDOWN_EVENTS = 5
#: flows in flight up to which a flow event costs SECONDS_PER_EVENT; past it, 1 + ln(flows /
#: this) times that (GPT-7.5B on 64 → 1,024 H100 with direct's every-pair all-reduce: 7.6 → 32 µs
#: per event, benchmarks/scale.py --family; its rings since stay at 6–8 µs: estimate_comm's width)
FLOW_GROUP = 64


@dataclass(frozen=True)
class Work:
    """Ops and simulated events of some part of a run, and the events' CPU ``weight``: each
    at the network's cost per event, a collective's messages more where they re-solve the
    shares of many flows (:data:`FLOW_GROUP`)."""

    ops: float = 0.0
    events: float = 0.0
    weight: float = 0.0

    def __add__(self, other: Work) -> Work:
        return Work(self.ops + other.ops, self.events + other.events, self.weight + other.weight)

    def __mul__(self, times: float) -> Work:
        return Work(self.ops * times, self.events * times, self.weight * times)


def plain(ops: float, events: float) -> Work:
    """``ops`` ops of ``events`` events at the base cost per event."""
    return Work(ops, events, events)


class GpuWork:
    """Prices the work of one GPU of a stage: a pass's segments (ops and simulated events)
    and an optimizer step's (its gradient reduction and step work), each collective over
    its own group (TP, CP, an expert group, the data-parallel group) by
    :class:`.estimate_comm.Collectives`. Unfolded, a member's share of a collective's
    messages is 1/n of them; folded, the representative's op carries every message of its
    group and of the groups it stands for (their shadows) — under ``fold_contention`` its
    own group's alone, the others riding on them as orbits (clustersim.network.orbits)."""

    def __init__(self, job, k, comm: Collectives):
        self.job, self.k, self.comm = job, k, comm
        self.plan = job.plan
        self.slowdown = job.cluster.comm_compute_slowdown > 1
        self.peak_messages = 0.0  # the most messages one collective call builds at once
        # a folded send carries its twins' traffic on a fabric whose links are shared; on
        # analytical and direct the shadows load nothing
        folded_shared = k.fold and k.network in ("packet", "flow")
        self.twins = self.plan.tp * self.plan.replicas if folded_shared and not k.orbits else 1
        self._groups: dict[tuple[int, str], tuple[tuple[int, ...], int]] = {}

    def group(self, stage: int, kind: str) -> tuple[tuple[int, ...], int]:
        """The group of ``kind`` of ``stage``'s first GPU, and how many groups of that kind
        the stage has that a folded representative stands for."""
        key = (stage, kind)
        if key not in self._groups:
            plan = self.plan
            if kind == "tp":
                members, count = tuple(plan.device(stage, 0, t) for t in range(plan.tp)), 1
            elif kind == "cp":
                members, count = plan.cp_ring(stage, 0, 0), plan.tp * plan.dp
            elif kind == "dp":
                layout = self.job.layout
                members = layout.group(stage) if self.job.parallel.stage_replicas else plan.dp_group(stage)
                count = plan.tp
            else:
                members = plan.expert_group(plan.device(stage, 0, 0), kind)
                count = len(plan.expert_groups(stage, kind))
            self._groups[key] = (members, count)
        return self._groups[key]

    def collective(self, members: tuple[int, ...], kind: str, nbytes: float, copies: int) -> Work:
        """One GPU's op of a ``kind`` collective over ``members`` (``copies``: the groups of
        its kind in the stage, side by side; folded, the representative's op stands for them)."""
        n = len(members)
        if n <= 1:
            return plain(1, 1)
        folded = self.k.fold
        # timed by its α-β form (the analytical model, or on ``flow`` a group inside one host's
        # private links or a call of negligible bytes: estimate_comm), no message
        timed = self.k.collective_model == "analytical" or self.comm.timed(members, kind, nbytes)
        # the rendezvous and phases: three per member on the fabric; three per collective
        # when timed (engine/dag.py, engine/interpreter.py), which folded is the
        # representative's op
        own = 3.0 if not timed or folded else 3 / n
        if self.slowdown:  # its start and end re-time the compute its GPU is running
            own += SLOWDOWN_EVENTS
        if timed:
            return plain(1, own)
        events, messages, width = self.comm.events(members, kind, nbytes)
        # every message of a call (and of the calls it stands for) is built when it starts
        # (folded under contention, the calls it stands for ride on its messages as orbits)
        copies_run = 1 if self.k.orbits else copies
        self.peak_messages = max(self.peak_messages, messages * (copies_run if folded else 1))
        events = events * copies_run if folded else events / n
        flows = width * copies_run  # folded under contention, the copies ride on its flows
        slower = 1 + math.log(max(flows, FLOW_GROUP) / FLOW_GROUP) if self.k.network == "flow" else 1.0
        return Work(1, own + events, own + events * slower)

    def pass_cost(self, stage: int, chunk: int, phase: str, split: bool) -> Work:
        """The work of one ``phase`` pass of model ``chunk`` on one GPU of ``stage``:
        its segments, and the pipeline transfers it receives and sends (a send to another
        stage is a message; folded, with its twins' as shadows on a shared fabric)."""
        job, pp = self.job, self.plan.pp
        costs, schedule = job.chunk_costs, job.schedule
        got, sent = pass_transfers(costs, phase, chunk, schedule.route(chunk, len(costs)))
        received = got is not None and schedule.stage_of(got[0], pp) != stage
        # the recv is an op of no event: its send's delivery ends it (engine/lane_core.py)
        work = plain(received, 0)
        if sent is not None and schedule.stage_of(sent[0], pp) != stage:
            hops = (
                self.comm.hops.inter
                if self.plan.tp * self.plan.replicas >= job.cluster.gpus_per_node
                else self.comm.hops.intra
            )
            work += self.sent(sent[1], hops)
        return work + self.segments(pass_segments(costs[chunk], phase, split, received), stage)

    def segments(self, segs, stage: int) -> Work:
        """The work of a pass's segments ``segs`` on one GPU of ``stage``."""
        k = self.k
        work = Work()
        joins = 0
        # at stage granularity a run of compute ops is one op (clustersim/coarsen.py); a job
        # resolved per layer priced at stage granularity (the advice's alternative) has its
        # collectives summed as well
        coarse = k.granularity == "stage"
        before = None
        for seg in _at_stage(segs) if k.granularity != self.job.simulation.granularity else segs:
            merged, before = coarse and before == "compute" == seg.kind, seg.kind
            if merged:
                continue
            if seg.kind == "compute":
                work += plain(1, 1)
            elif seg.kind == "collective":
                members, count = self.group(stage, seg.group)
                work += self.collective(members, seg.collective, seg.nbytes, count)
            elif seg.kind == "ring":  # ring attention: a chunk per step, a K/V send and recv per step
                members, _ = self.group(stage, "cp")
                sent = [b for b in seg.step_bytes if b]
                hops = (
                    self.comm.hops.inter
                    if len({d // self.job.cluster.gpus_per_node for d in members}) > 1
                    else self.comm.hops.intra
                )
                # the chunks and recvs, then the sends (folded, with the stage's other hops as shadows;
                # a ring of mixed hops checked as it runs, a flow with its events per kind of hop)
                work += plain(len(seg.steps) + len(sent), len(seg.steps))
                each = k.fold and self.job.fold.enabled and self.job.fold.checked_ring
                work += sum((self.sent(b, hops, each) for b in sent), Work())
                joins = 1
            else:  # a TP collective pipelined with its GEMM in chunks (compilers/pipeline/tp_overlap.py)
                work += self.overlap(seg)
                joins = joins or seg.method == BULK
        return work + plain(joins, joins)

    def overlap(self, seg: Segment) -> Work:
        """The work of a TP collective pipelined with its GEMM (compilers/pipeline/tp_overlap.py):
        its GEMM chunks (each followed by an op holding TE's SM margin where it has one) and
        its userbuffers transfers to the next TP rank, each a send and a recv — ring
        exchange n − 1 of ``bytes / tp``, pipeline n of a chunk's reduce-scatter share, bulk
        one; folded, with its twins' as shadows on a shared fabric."""
        tp, n = self.plan.tp, seg.chunks if seg.method != BULK else 1
        if seg.method == RING:
            steps, nbytes = n - 1, seg.nbytes // tp
        else:
            steps, nbytes = n, seg.nbytes // n * (tp - 1) // tp
        gemms = n * (2 if seg.margin else 1)
        # the recvs (no event) and the GEMMs, then the sends
        return plain(gemms + steps, gemms) + self.sent(nbytes, self.comm.hops.intra) * steps

    @cached_property
    def hop_kinds(self) -> int:
        """The kinds of hop of a folded ring of mixed hops (:func:`.hidden_ring.hop_kinds`; read
        when first needed)."""
        return hop_kinds(self.job)

    def sent(self, nbytes: float, hops: float, each: bool = False) -> Work:
        """The work of one send op of ``nbytes`` over ``hops`` links with its folded twins'
        (their loads: on ``flow`` without events of their arrivals, unless ``each``: a mixed
        ring's hops, one flow with its events per kind of hop)."""
        own = message_events_of(self.k, nbytes, hops)
        if each:
            return plain(1, own * self.hop_kinds)
        if self.k.network == "flow":
            return Work(1, own + (self.twins - 1) * LOAD_EVENTS, own + (self.twins - 1) * LOAD_WEIGHT)
        return plain(1, own * self.twins)

    def step_cost(self, stage: int, chunks: list[int], reps: int) -> Work:
        """The work of one optimizer step of one GPU of ``stage``: the data-parallel
        reduction over its ``reps`` replicas (compilers/pipeline/data_parallel.py,
        gradient_sync.py), the expert gradients' over their group, the step work of a
        flushing schedule (compilers/pipeline/step_work.py) and the optimizer."""
        job, plan = self.job, self.plan
        costs = [job.chunk_costs[c] for c in chunks]
        work = plain(1, 1)  # the optimizer
        if reps > 1:
            members, count = self.group(stage, "dp")
            for kind, pieces, nbytes in _dp_collectives(job, costs):
                work += self.collective(members, kind, nbytes / pieces, count) * pieces
        expert = sum(c.expert_grad_bytes for c in costs)
        if expert and not job.parallel.stage_replicas:
            members, count = self.group(stage, "edp")
            work += self.collective(members, "all_reduce", expert, count)
        if not job.schedule.flush or job.parallel.stage_replicas:
            return work
        last = job.schedule.stage_of(len(job.chunk_costs) - 1, plan.pp)
        if any(c.tied_grad_bytes for c in costs) and last != job.schedule.stage_of(0, plan.pp):
            if stage in (0, last):
                pair = (0, 1)  # the first and the last stage's GPU (their route: a pair's)
                work += self.collective(pair, "all_reduce", costs[0].tied_grad_bytes, plan.tp * plan.replicas)
        sharded = job.parallel.zero > 0
        group = grad_stats_group(plan, 0, sharded)
        copies = 1 if sharded else plan.replicas
        for seconds in (sum(c.unscale for c in costs), sum(c.grad_norm for c in costs)):
            if seconds:
                work += plain(1, 1)  # the pass over the gradients
                if len(group) > 1:  # folded, the stages' representatives meet in one call
                    share = 1 / plan.pp if self.k.fold else 1
                    reduce = self.collective(group, "all_reduce", SCALAR_BYTES, copies)
                    work += Work(1, reduce.events * share, reduce.weight * share)
        return work


def _dp_collectives(job, costs) -> list[tuple[str, int, float]]:
    """(kind, pieces, bytes) of a stage's data-parallel collectives per optimizer step:
    one all-reduce of its gradients, or as ``parallel.data_parallel`` cuts them (buckets,
    reduce-scatter and all-gather when sharded, per FSDP unit and micro-batch)."""
    d = job.data_parallel
    out = []
    for cost in costs:
        grads = cost.gradient_bytes
        pieces, kinds = 1, ("all_reduce",)
        if d is not None:
            if d.bucket_size:  # the compiler's buckets: whole layers, last first, until one holds bucket_size
                pieces = max(1, len(buckets(cost.layer_bytes("grads"), d.bucket_size, d.first_bucket_size)))
            if d.sharded or d.fsdp:
                kinds = ("reduce_scatter", "all_gather")
            visits = 3 * sum(len(m) for m in cost.layer_modules)  # DeepSpeed: forward, recompute, backward
            if d.fsdp and d.zero3 is not None and visits:
                pieces = visits * job.num_microbatches
            elif d.fsdp:
                pieces = max(pieces, math.ceil(cost.layers / d.unit)) * job.num_microbatches
        out.extend((kind, pieces, grads) for kind in kinds)
    return out


def _at_stage(segs: tuple[Segment, ...]) -> tuple[Segment, ...]:
    """A pass's segments as ``granularity: stage`` builds them (workload/segments.py): its
    compute around one collective per group and kind carrying their summed bytes (a pass
    with ring attention or TP overlap runs only per layer, and is kept)."""
    if any(seg.kind in ("ring", "overlap") for seg in segs):
        return segs
    sums: dict[tuple[str, str], int] = {}
    for seg in segs:
        if seg.kind == "collective":
            sums[seg.group, seg.collective] = sums.get((seg.group, seg.collective), 0) + seg.nbytes
    colls = tuple(Segment("collective", nbytes=b, collective=c, group=g) for (g, c), b in sums.items())
    compute = Segment("compute")
    return (compute, *colls, compute) if colls else (compute,)


def message_events_of(k, nbytes: float, hops: float) -> float:
    """Simulated events of one point-to-point message under ``k``'s network model: all a
    Program's send costs (on a fixed-time fabric the one timeout its lane holds, else the
    fabric's transfer), its recv none (its send's delivery ends it, engine/lane_core.py)."""
    return message_events(k.network, k.chunk, k.max_chunks, nbytes, hops)
