"""A plan's iteration time and peak memory without compiling it — to rank a search's space.

:class:`Estimator` prices one loaded plan (a Scenario) without ops, from what the
simulation itself would start from:

* **each pass** — the chunk costs of the cost model (:func:`clustersim.resolve.resolve`,
  cached over plans that differ only in their schedule), each pass's segments as the
  compiler emits them (:func:`clustersim.workload.pass_costs.pass_segments`, with the
  Megatron-2021 all-gather where the pass receives from another stage): compute kernels,
  plus TP / CP / EP collectives and ring-attention steps priced by the α-β closed forms of
  :mod:`clustersim.collectives` on an idle network (the algorithm ``auto`` would pick,
  :func:`~clustersim.collectives.registry.choose_algorithm`); an overlapped F&B pair both
  passes less the communication each hides under the other's compute;
* **the pipeline** — a flushing schedule's own per-stage order for one iteration, timed
  stage by stage (:mod:`.stage_timing`: each pass after the previous one on its stage and
  after its input's send; the longest path over (stage, pass)), so the fill, drain and
  every idle gap are the schedule's own — V placement, chunks, split backwards and F&B
  pairs included, with no formula per schedule. A flush-free schedule (PipeDream, searched
  only when asked for) takes 1F1B's (p − 1)(t_F + t_B) bubble on its slowest stage and the
  fill and drain's sends along a micro-batch's route;
* **the step** — after each stage's last pass its data-parallel gradient all-reduce (and
  the experts' over the expert-data-parallel group; with ``overlap_grad_reduce`` what
  outlasts one micro-batch's backward), then a flushing schedule's step work
  (:mod:`clustersim.compilers.pipeline.step_work`: the tied embedding's all-reduce between the
  first and the last chunk's stages, the loss-scale check and gradient norm with their
  scalar all-reduces over every stage) and the optimizer.

Peak memory is the engine's ledger replayed over the schedule's order per stage, without
ops: each stage's static bytes (:func:`~clustersim.workload.pass_costs.stage_static_memory`)
plus, at every forward, the activations (and stashed weights) its passes hold —
:func:`~clustersim.workload.pass_costs.pass_memory`, the compiler's own rule — so it equals
:func:`clustersim.experiments.memory.tightest_fit` wherever the uniform pipeline compiler
runs without FSDP units; other modes (parameter servers, stage replicas, inference, mixed
GPUs, ZeRO-3 with ``parallel.data_parallel``) take that exact replay instead.

The time is an estimate (tests/test_search_estimate.py states its bound against the
simulation); a search ranks by it and simulates only the best ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from itertools import groupby
from typing import Any, NamedTuple

from ..accel import load
from ..collectives.cost import Shape
from ..collectives.group import resolve_alpha
from ..collectives.protocol import resolve_protocols
from ..collectives.registry import plan as collective_plan
from ..compilers import check_job, mode_of
from ..hardware.node_groups import gpu_spec, gpu_types, heterogeneity
from ..parallel.data_parallel import SCALAR_BYTES, grad_stats_group
from ..resolve import Job, resolve
from ..resolve.job import job_identity
from ..scenario import Scenario
from ..schedules.flush import one_f_one_b
from ..schedules.orders import run_orders, stage_chunks
from ..schedules.registry import SCHEDULES, Schedule
from ..topology.servers import nics_per_node
from ..workload.pass_costs import pass_memory, pass_segments, stage_static_memory
from ..workload.tp_overlap import PIPELINE, RING
from .memory import tightest_fit
from .stage_timing import Timeline
from .steady_1f1b import OneFOneB

_accel = load("clustersim.workload._chost")  # built by setup.py where a C compiler works


@dataclass(frozen=True)
class PlanEstimate:
    """One plan's estimated iteration (seconds: its compute on the slowest stage, bubble,
    exposed communication, optimizer) and peak memory against its GPU's capacity."""

    iteration_s: float
    compute_s: float
    bubble_s: float
    comm_s: float
    memory_bytes: float
    capacity_bytes: float


class _Host:
    """The α-β view of a group for :func:`~clustersim.collectives.registry.plan`: members, hosts,
    shape and the system's NCCL protocols."""

    def __init__(self, devices: tuple[int, ...], gpn: int, shape: dict[str, Any], protocols):
        self.members = list(devices)
        self.protocols = protocols
        self.hosts: dict[int, list[int]] = {}
        # a host's members, in the group's order: one step per run of them (a group meets its
        # hosts' members together), not one per device
        for h, members in groupby(devices, gpn.__rfloordiv__):
            self.hosts.setdefault(h, []).extend(members)
        if len(self.hosts) == 1:
            shape = {k: v for k, v in shape.items() if not k.endswith("_inter")}
        self._shape = Shape(len(devices), **shape, nodes=len(self.hosts))

    def shape(self) -> Shape:
        return self._shape


class _Network:
    """Per-rank α-β parameters of a cluster (idle network, as the collective closed forms)."""

    def __init__(self, job: Job):
        cl = job.cluster
        intra = cl.intra_node
        self.gpn = cl.gpus_per_node
        alpha = resolve_alpha(cl.collective_alpha, "pcie" if "pcie" in str(intra.kind) else "nvlink")
        self.intra_bw = intra.bandwidth * getattr(intra, "efficiency", 1.0)
        self.intra_lat = 2 * intra.latency  # GPU → switch → GPU
        self.nic_bw = cl.nic.bandwidth * cl.nic.efficiency
        self.nic_lat = 2 * cl.nic.latency
        self.nics = nics_per_node(cl.nic.per_node, cl.gpus_per_node)
        self.shape = {
            "bw": self.intra_bw,
            "alpha": alpha["intra_node"] + self.intra_lat,
            "alpha_inter": alpha["inter_node"] + self.nic_lat,
            "latency": cl.collective_latency,
        }
        self.algorithms = dict(job.simulation.collectives)
        self.protocols = resolve_protocols(cl.collective_protocols)
        #: whether every GPU is alike (no mixed types, speed factors): the memory replay's
        #: condition, and then a GPU's memory (bytes)
        self.uniform = heterogeneity(cl) is None
        # device 0's (:func:`~clustersim.hardware.node_groups.device_memory`'s first): the first
        # node's GPU, read without listing every device
        self.capacity = float(gpu_spec(cl, gpu_types(cl)[0]).memory_bytes)
        # what prices a collective besides its kind, members per host and bytes (:func:`idle_collective`)
        self._key = (tuple(self.shape.items()), self.nic_bw, self.nics, self.protocols)
        self._asked: dict[tuple, float] = {}  # by its devices: the same groups come back plan after plan
        # by its value (kind, members per host, bytes): every stage's DP group is one of a few
        self._priced: dict[tuple, float] = {}

    def collective(self, kind: str, devices: tuple[int, ...], nbytes: float) -> float:
        """Idle-network seconds of collective ``kind`` of ``nbytes`` over ``devices``."""
        if len(devices) <= 1:
            return 0.0
        t = self._asked.get((kind, devices, nbytes))
        if t is None:
            # members per host, in the order the group meets them (counted in C): one each
            # where no two share a host (a DP group across pipeline stages)
            hosts = list(map(self.gpn.__rfloordiv__, devices))
            once = len(set(hosts)) == len(hosts)
            value = (kind, (1,) * len(hosts) if once else tuple(Counter(hosts).values()), nbytes)
            t = self._priced.get(value)
            if t is None:
                algorithm = self.algorithms.get(kind) or "auto"
                t = self._priced[value] = idle_collective(*value, self.gpn, self._key, algorithm)
            self._asked[kind, devices, nbytes] = t
        return t

    def send(self, a: int, b: int, nbytes: float) -> float:
        """A point-to-point message from device ``a`` to ``b`` (latency + bytes / bandwidth)."""
        if a // self.gpn == b // self.gpn:
            return self.intra_lat + nbytes / self.intra_bw
        return self.nic_lat + nbytes / self.nic_bw


@lru_cache(maxsize=4096)
def idle_collective(
    kind: str, per_host: tuple[int, ...], nbytes: float, gpn: int, network: tuple, algorithm: str
) -> float:
    """Idle-network seconds of collective ``kind`` of ``nbytes`` over a group of
    ``per_host`` members on each of its hosts (in the order the group meets them), on a
    network of ``gpn`` GPUs a node and ``network`` = (α-β shape items, NIC B/s, NICs a node,
    protocols) (:class:`_Network`), by ``algorithm``: the engine's choice and time, least
    protocol latency + α-β on the protocol's wire bytes. All the closed forms read (n,
    members per host, shape) — every stage's DP group is one — so it is a pure function of
    these values, cached: a search's plans and a sweep's configurations share it."""
    shape, nic_bw, nics, protocols = network
    devices = tuple(h * gpn + i for h, k in enumerate(per_host) for i in range(k))
    shape = {**dict(shape), "bw_inter": nic_bw * min(nics, per_host[0]) / per_host[0]}
    group = _Host(devices, gpn, shape, protocols)
    return collective_plan(group, kind, int(nbytes), algorithm)[2]


class _Shape(NamedTuple):
    """What the estimate reads of a schedule's orders for one (schedule, p, m, v)."""

    #: whether the order splits backwards into B and W
    split: bool
    #: one iteration's passes to time (None: a flush-free schedule, timed in closed form)
    timeline: Timeline | None
    #: per stage the live (activations, stashed weights) counts per local chunk at each
    #: forward that can set the peak (:func:`_live_vectors`, :func:`_maximal`)
    vectors: list[list[tuple[int, ...]]]
    #: per stage the model chunks it holds
    chunks: list[list[int]]


@lru_cache(maxsize=32)
def schedule_shape(schedule: Schedule, p: int, m: int, v: int, iterations: int) -> _Shape:
    """What the estimate reads of ``schedule``'s orders for p stages, m micro-batches, v
    chunks per stage (``iterations``: 1 for a flushing schedule) — a function of the shape
    alone, so cached across estimators: a search's plans and a sweep's configurations that
    share a shape build its orders, timeline and live vectors once (a 1T-parameter plan's
    64 stages × 512 micro-batches are most of its estimate's time)."""
    if schedule.factory is one_f_one_b and v == 1:  # its order in closed form: no orders built
        # at most min(p − s, m) micro-batches' activations live on stage s (schedules/flush.py)
        vectors = [[(min(p - s, m), 0)] for s in range(p)]
        return _Shape(False, OneFOneB(p, m), vectors, [[s] for s in range(p)])
    orders = run_orders(schedule, p, m, v, iterations)
    split = any(ph == "W" for order in orders for ph, _, _ in order)
    timeline = Timeline(schedule, orders, p) if schedule.flush else None
    vectors = [_maximal(_live_vectors(schedule, order, s, p, v)) for s, order in enumerate(orders)]
    chunks = [stage_chunks(schedule, s, p, v) for s in range(p)]
    return _Shape(split, timeline, vectors, chunks)


class Estimator:
    """Estimates plans of one search (:class:`PlanEstimate`), caching what plans share:
    chunk costs and pass times by everything but the schedule, and each schedule shape
    (:func:`schedule_shape`, whose latest shapes every estimator shares) by (schedule, p, m, v)."""

    def __init__(self) -> None:
        self._priced: dict[tuple, tuple[Job, list[dict[str, float]]]] = {}
        self._networks: dict[int, _Network] = {}
        # a search's shapes, all of them (the shared cache keeps only the latest)
        self._shapes: dict[tuple, _Shape] = {}

    def check(self, sc: Scenario, plan: Mapping[str, Any]) -> None:
        """Refuse plan ``plan`` (the override dict ``sc`` was loaded from) where its compiler
        would refuse to run it (:func:`clustersim.compilers.check_job`, what ``simulate`` asks
        first): checked on the priced Job its plan shares, given this plan's own schedule
        (the checks read the plan's settings and layout, not its chunk costs)."""
        job, _ = self._priced_job(sc, plan)
        if job.parallel != sc.parallel:
            job = replace(job, parallel=sc.parallel, schedule=SCHEDULES[sc.parallel.schedule])
        check_job(job)

    def identity(self, sc: Scenario, plan: Mapping[str, Any]) -> tuple:
        """The :func:`~clustersim.resolve.job.job_identity` of plan ``plan``'s job, from
        the costs this estimator priced for it: plans of equal identity are one plan."""
        job = self._priced_job(sc, plan)[0]
        return job_identity(sc.resolved(), job.costs, job.layer_costs)

    def estimate(self, sc: Scenario, plan: Mapping[str, Any]) -> PlanEstimate:
        """The estimate of plan ``plan`` (the override dict ``sc`` was loaded from)."""
        schedule = SCHEDULES[sc.parallel.schedule]
        job, times = self._priced_job(sc, plan)  # the costs of a plan that may differ in its schedule
        m = sc.num_microbatches
        v = sc.parallel.virtual_stages
        key = (schedule, job.plan.pp, m, v, 1 if schedule.flush else sc.simulation.iterations)
        if key not in self._shapes:
            self._shapes[key] = schedule_shape(*key)
        shape = self._shapes[key]
        net = self._network(job)
        if net.uniform and self._fast_memory(job):
            memory, capacity = self._memory(job, schedule, shape, net.capacity)
        else:
            memory, capacity = tightest_fit(job if job.schedule is schedule else resolve(sc))
        return self._time(job, schedule, times, shape, m, net, memory, capacity)

    def _priced_job(self, sc: Scenario, plan: Mapping[str, Any]) -> tuple[Job, list[dict[str, float]]]:
        """The resolved Job and pass times of the plans that differ from ``plan`` only in
        their schedule (resolved on first use)."""
        schedule = SCHEDULES[sc.parallel.schedule]
        v = sc.parallel.virtual_stages
        own = ("parallel.schedule", "parallel.virtual_stages")  # the costs see them as the chunk counts
        key = tuple(sorted((k, repr(x)) for k, x in plan.items() if k not in own))
        key += (schedule.model_chunks(sc.parallel.pp, v), schedule.directions, v)
        if key not in self._priced:
            job = resolve(sc)
            groups, net, pipelined = _groups(job), self._network(job), job.plan.pp > 1
            priced: dict[int, _PassTimes] = {}  # a pipeline's middle chunks are one cost object
            for c in job.chunk_costs:
                priced.setdefault(id(c), _PassTimes(c, groups, net, pipelined))
            self._priced[key] = (job, [priced[id(c)] for c in job.chunk_costs])
        return self._priced[key]

    # ---- memory -----------------------------------------------------------------------------

    @staticmethod
    def _fast_memory(job: Job) -> bool:
        """Whether the order replay equals the compiled ledger (module docstring), on a
        cluster of one GPU type (:attr:`_Network.uniform`)."""
        fsdp = job.parallel.data_parallel is not None and job.parallel.zero == 3
        return mode_of(job).name == "pipeline" and job.replicas is None and not fsdp

    @staticmethod
    def _memory(job: Job, schedule: Schedule, shape: _Shape, capacity: float) -> tuple[float, float]:
        costs, vectors = job.chunk_costs, shape.vectors
        stash = schedule.weights == "stash"
        peak, reserve = 0.0, job.runtime_reserve

        def fixed(chunks: list) -> tuple[float, list[int]]:
            held = [(c.activation_memory, c.weight_bytes if stash else 0) for c in chunks]
            return stage_static_memory(schedule.weights, chunks, reserve).total, _flat(held)

        stages = _per_stage([[costs[k] for k in ks] for ks in shape.chunks], fixed)
        for s, (static, held) in enumerate(stages):
            live = max((sum(n * b for n, b in zip(vec, held)) for vec in vectors[s]), default=0)
            peak = max(peak, static + live)
        return peak, capacity

    # ---- time ---------------------------------------------------------------------------------

    def _network(self, job: Job) -> _Network:
        n = job.num_gpus
        if n not in self._networks:
            self._networks[n] = _Network(job)
        return self._networks[n]

    def _time(self, job, schedule, times, shape: _Shape, m, net, memory, capacity) -> PlanEstimate:
        plan, p, split, timeline = job.plan, job.plan.pp, shape.split, shape.timeline
        costs = job.chunk_costs
        d = schedule.directions
        phases = ("F", "Bi", "W") if split else ("F", "B")
        per_stage = _per_stage(  # per micro-batch: (F, B, W) of each stage, its chunks' share
            [[times[k] for k in ks] for ks in shape.chunks],
            lambda ts: tuple(sum(t[ph, p > 1][0] for t in ts) / d for ph in phases) + (0.0,) * (not split),
        )
        hops = 0.0
        if p > 1:  # a micro-batch's route down and back: each chunk boundary between two stages
            route = schedule.route(0, len(costs))
            cross = [(schedule.stage_of(k, p), schedule.stage_of(k + 1, p)) for k in route[:-1]]
            nbytes = max(c.activation_bytes for c in costs)
            hops = 2 * sum(net.send(plan.device(a), plan.device(b), nbytes) for a, b in cross if a != b)
        if timeline is not None:  # the schedule's own order, timed pass by pass
            durations = [_duration(times, key) for key in timeline.keys]
            per = plan.device(1)  # stage s's first device is per × s: plan.device(s), without a call
            sends = [net.send(per * a, per * b, costs[c].activation_bytes) for a, b, c in timeline.sends]
            ends = timeline.run(durations, sends, apart=_pairs_only_compute(times, timeline.keys))
            compute = max(timeline.busy(durations))
            hops = min(hops, max(ends) - compute)
        else:  # flush-free (PipeDream, asked for only): the 1F1B closed form on the slowest stage
            *_, slow = max((sum(x), s) for s, x in enumerate(per_stage))
            compute = m * sum(per_stage[slow])
            fill = sum(sum(x) for s, x in enumerate(per_stage) if s != slow)
            ends = [compute + fill + hops] * p
        ready = list(ends)  # each stage's gradients reduced over its data-parallel group
        overlap = job.parallel.data_parallel is not None and job.parallel.data_parallel.overlap_grad_reduce
        grads = _per_stage(
            [[costs[k] for k in ks] for ks in shape.chunks],
            lambda cs: (sum(c.gradient_bytes for c in cs), sum(c.expert_grad_bytes for c in cs)),
        )
        for s, (dense, expert) in enumerate(grads):
            t_sync = 0.0
            if plan.replicas > 1 or d > 1:
                mirror = p - 1 - s if d > 1 else s
                group = plan.dp_group(s)  # in device order
                if mirror != s:
                    group = tuple(sorted({*group, *plan.dp_group(mirror)}))
                t_sync = net.collective("all_reduce", group, dense)
            if expert and plan.edp > 1:
                t_sync += net.collective("all_reduce", plan.expert_group(plan.device(s), "edp"), expert)
            if overlap:  # what outlasts the stage's last backward
                t_sync = max(0.0, t_sync - per_stage[s][1] - per_stage[s][2])
            ready[s] += t_sync
        done, optimizer = _step(job, schedule, shape, net, ready)
        span = max(ends)
        optimizer = min(optimizer, done - span)
        bubble = span - compute - hops
        return PlanEstimate(done, compute, bubble, hops + done - span - optimizer, memory, capacity)


def _per_stage(stages: list[list], row) -> list:
    """``row`` of each stage's chunk objects (its chunk costs or pass times), made once for the
    stages that hold the same objects (a pipeline's middle stages)."""
    made: dict[tuple[int, ...], Any] = {}
    out = []
    for chunks in stages:
        same = tuple(map(id, chunks))
        if same not in made:
            made[same] = row(chunks)
        out.append(made[same])
    return out


def _step(
    job: Job, schedule: Schedule, shape: _Shape, net: _Network, ready: list[float]
) -> tuple[float, float]:
    """(when the last stage's optimizer ends, the longest stage's step compute) from when
    each stage's gradients are reduced (``ready``): a flushing schedule's step work of
    :mod:`clustersim.compilers.pipeline.step_work` — the tied embedding's all-reduce between the
    first and last chunk's stages, the loss-scale check and the gradient norm, each a
    pass over the stage's gradients and a scalar all-reduce over every stage (a
    rendezvous) — then each stage's optimizer."""
    plan, p, costs = job.plan, job.plan.pp, job.chunk_costs
    chunks = [[costs[k] for k in ks] for ks in shape.chunks]
    # per stage its chunks' (unscale, grad_norm, optimizer, all three) seconds
    rows = _per_stage(
        chunks,
        lambda cs: (
            sum(c.unscale for c in cs),
            sum(c.grad_norm for c in cs),
            sum(c.optimizer for c in cs),
            sum(c.optimizer + c.unscale + c.grad_norm for c in cs),
        ),
    )
    t = list(ready)
    if schedule.flush:
        ends = (schedule.stage_of(0, p), schedule.stage_of(len(costs) - 1, p))
        tied = max(sum(c.tied_grad_bytes for c in chunks[s]) for s in ends)
        if tied and ends[0] != ends[1]:
            pair = tuple(plan.device(s) for s in ends)
            t[ends[0]] = t[ends[1]] = max(t[s] for s in ends) + net.collective("all_reduce", pair, tied)
        group = grad_stats_group(plan, 0, job.parallel.zero > 0)
        for column in (0, 1):  # the unscale, then the gradient norm
            seconds = [row[column] for row in rows]
            if any(seconds):
                t = [x + y for x, y in zip(t, seconds)]
                if len(group) > 1:
                    t = [max(t) + net.collective("all_reduce", group, SCALAR_BYTES)] * p
    optimizer = [row[2] for row in rows]
    step = max(row[3] for row in rows)
    return max(x + y for x, y in zip(t, optimizer)), step


class _PassTimes(dict):
    """One chunk's passes: per (phase — F, B, Bi the input-gradient part, W —, whether the
    pass received its input from another stage) its seconds and, of them, its communication
    — what an overlapped F&B pair can hide under the other pass's compute (a ring's
    attention chunks and an overlap's GEMM are compute: only what outlasts them is not).
    Each is priced when first asked for: a plan needs only the passes its schedule runs."""

    def __init__(self, cost, groups: Mapping[str, tuple[int, ...]], net: _Network, pipelined: bool):
        super().__init__()
        self._cost, self._groups, self._net, self._pipelined = cost, groups, net, pipelined

    def __missing__(self, key: tuple[str, bool]) -> tuple[float, float]:
        phase, received = key
        if received and not (self._cost.recv_gather and self._pipelined):
            value = self[phase, False]  # nothing is gathered: the same pass
        else:
            segs = pass_segments(self._cost, phase[0], phase in ("Bi", "W"), received)
            total = _segments_time(segs, self._groups, self._net)
            compute = sum(g.duration for g in segs if g.kind != "collective")
            value = (total, max(0.0, total - compute))
        self[key] = value
        return value


def _duration(times: list[dict], key: tuple) -> float:
    """Seconds of a :class:`.stage_timing.Timeline` key: a pass's, or an overlapped F&B pair's
    — both passes less the communication each hides under the other's compute
    (:mod:`clustersim.compilers.pipeline.overlap`); the empty key (a pair's wait for its input) is 0."""
    if not key:
        return 0.0
    if key[0] != "F&B":
        return times[key[1]][key[0], key[2]][0]
    _, kf, rf, phase, kb, rb = key
    f, fc = times[kf]["F", rf]
    b, bc = times[kb][phase, rb]
    return f + b - min(fc, b - bc) - min(bc, f - fc)


def _pairs_only_compute(times: list[dict], keys: list[tuple]) -> bool:
    """Whether every overlapped F&B pair's two passes only compute (nothing to hide): the
    compiler then runs the forward, then the backward (compilers/pipeline/overlap.py)."""
    pairs = [key for key in keys if key and key[0] == "F&B"]
    return bool(pairs) and all(
        times[kf]["F", rf][1] == 0 and times[kb][phase, rb][1] == 0 for _, kf, rf, phase, kb, rb in pairs
    )


def _flat(held: list[tuple[int, int]]) -> list[int]:
    return [x for pair in held for x in pair]


def _live_vectors(schedule: Schedule, order, s: int, p: int, v: int) -> list[tuple[int, ...]]:
    """The distinct (activations, stashed) counts per local chunk (flattened) after each
    forward of stage ``s``'s ``order`` — where the ledger can peak — by the compiler's
    :func:`pass_memory` rule with unit bytes (its counts, not its sizes)."""
    local = {k: i for i, k in enumerate(stage_chunks(schedule, s, p, v))}
    has_w = {(j, k) for ph, j, k in order if ph == "W"}
    stash = schedule.weights == "stash"
    counts = [0] * (2 * len(local))
    seen: set[tuple[int, ...]] = set()
    unit = _Unit()
    for ph, j, k in order:
        if ph == "O":
            continue
        alloc, free, stashed = pass_memory(unit, ph, (j, k) in has_w, stash)
        i = 2 * local[k]
        if alloc:
            counts[i] += 1 if alloc - stashed else 0
            counts[i + 1] += 1 if stashed else 0
            seen.add(tuple(counts))
        if free:
            counts[i] -= 1 if free - stashed else 0
            counts[i + 1] -= 1 if stashed else 0
    return sorted(seen)


def _maximal(vectors: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The ``vectors`` no other one is at least in every count: the peak's candidates
    whatever the (non-negative) bytes — a dot product with them cannot fall as a count
    rises, in floating point too (each product and each sum rounds monotonically), so the
    peak over these is the peak over all, to the bit."""
    keep: list[tuple[int, ...]] = []
    for vec in sorted(vectors, key=sum, reverse=True):  # a dominating vector sums at least as much
        if not any(all(a >= b for a, b in zip(k, vec)) for k in keep):
            keep.append(vec)
    return keep


class _Unit:
    """A chunk cost of one activation byte and one weight byte: what :func:`pass_memory`
    moves for it says which counts a pass changes."""

    activation_memory = 1
    weight_bytes = 1


def _groups(job: Job) -> dict[str, tuple[int, ...]]:
    """The devices of stage 0's first group of each kind a segment runs over."""
    plan = job.plan
    first = plan.device(0)
    out = {"tp": tuple(plan.device(0, 0, t) for t in range(plan.tp)), "cp": plan.cp_ring(0, 0)}
    if plan.ep > 1 or plan.expert_tp != plan.tp:
        for kind in ("ep", "etp", "tp_ep"):
            out[kind] = plan.expert_group(first, kind)
    return out


def _segments_time(segs, groups: Mapping[str, tuple[int, ...]], net: _Network) -> float:
    """Seconds of one pass's segments run one after another (:func:`_pass_seconds`, in C
    where the accelerator is built: ``workload/_chost.c``)."""
    seconds_of = partial(_segment_time, groups=groups, net=net)
    return (_pass_seconds if _accel is None else _accel.pass_seconds)(segs, seconds_of)


def _pass_seconds(segs, seconds_of) -> float:
    """Seconds of a pass's segments run one after another, ``seconds_of`` each; a compute
    segment marked ``overlap`` beside its neighbouring collective takes the longer of the two."""
    known: dict[int, float] = {}  # by the segment's identity: a pass repeats its layers' segments
    times = []
    for seg in segs:
        t = known.get(id(seg))
        if t is None:
            t = known[id(seg)] = seconds_of(seg)
        times.append(t)
    total, k, n = 0.0, 0, len(segs)
    while k < n:
        a = segs[k]
        if k + 2 < n:  # a pair that is not the pass's last two segments
            b = segs[k + 1]
            if (a.overlap and b.kind == "collective") or (a.kind == "collective" and b.overlap):
                total += max(times[k], times[k + 1])
                k += 2
                continue
        total += times[k]
        k += 1
    return total


def _segment_time(seg, groups: Mapping[str, tuple[int, ...]], net: _Network) -> float:
    if seg.kind == "compute":
        return seg.duration
    group = groups.get(seg.group, groups["tp"])
    if seg.kind == "collective":
        nbytes = max(sum(row) for row in seg.matrix) if seg.matrix else seg.nbytes
        return net.collective(seg.collective, group, nbytes)
    if seg.kind == "ring":  # each step: its attention chunk or its K/V transfer, the longer
        hop = (group[0], group[1 % len(group)])
        return sum(max(t, net.send(*hop, x)) for t, x in zip(seg.steps, seg.step_bytes))
    return _overlap_time(seg, group, net)


def _overlap_time(seg, group: tuple[int, ...], net: _Network) -> float:
    """A GEMM pipelined with userbuffers transfers between TP neighbours, the closed forms
    of :mod:`clustersim.compilers.pipeline.tp_overlap` (n chunks of g s, each transfer c s)."""
    n, t = seg.chunks, len(group)
    g = (seg.duration + seg.margin) / n
    hop = (group[0], group[1 % t])
    if seg.method == RING:  # n − 1 steps of one shard each
        return g + (n - 1) * max(g, net.send(*hop, seg.nbytes // t))
    c = net.send(*hop, seg.nbytes // n * (t - 1) // t)  # a reduce-scatter chunk's share
    if seg.method == PIPELINE:
        return g + (n - 1) * max(g, c) + c
    return max(g, c)  # bulk
