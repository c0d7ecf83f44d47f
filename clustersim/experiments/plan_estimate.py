"""A plan's iteration time and peak memory without compiling it — to rank a search's space.

:class:`Estimator` prices one loaded plan (a Scenario) in closed form, from what the
simulation itself would start from:

* **compute per stage** — the chunk costs of the cost model (:func:`clustersim.resolve.resolve`,
  cached over plans that differ only in their schedule), each pass's segments as the
  compiler emits them (:func:`clustersim.schedules.compiler.pass_segments`): compute
  kernels, plus TP / CP / EP collectives and ring-attention steps priced by the α-β closed
  forms of :mod:`clustersim.collectives` on an idle network (the algorithm ``auto`` would
  pick, :func:`~clustersim.collectives.registry.choose_algorithm`);
* **bubble** by the schedule's formula, from the slowest stage's F, B and W per
  micro-batch (t_F, t_B, t_W; B the input-gradient part where the schedule splits it):
  GPipe / 1F1B (p − 1)(t_F + t_B + t_W) (Narayanan et al. 2021 §2.2); interleaved that / v;
  ZB-H1 (p − 1)·max(0, t_F + t_B − t_W) and ZB-H2 (p − 1)·max(0, t_F + t_B − 2t_W) (Qi et al.
  2024, "Zero Bubble Pipeline Parallelism" Table 1); ZB-V the ZB-H2 form on its half-stage
  chunks; DualPipe (p/2 − 1)·max(0, T_F&B + T_B − 3T_W) with T_F&B = t_F + t_B + t_W
  (DeepSeek-V3 report Table 2), DualPipe-V the same on its p − 1 half-stage chunk pairs;
  any other schedule as 1F1B;
* **exposed communication** — the pipeline's fill and drain send a micro-batch across
  every stage boundary of its route down and back (2(p − 1) for one chunk per stage,
  2(p·v − 1) interleaved; latency + bytes / bandwidth each); the data-parallel gradient all-reduce
  (and the experts' over the expert-data-parallel group) after the last backward — all of
  it in the 2021 model, what outlasts one micro-batch's backward with
  ``overlap_grad_reduce``; then the optimizer step.

Peak memory is the engine's ledger replayed over the schedule's order per stage, without
ops: each stage's static bytes (:func:`~clustersim.schedules.compiler.stage_static_memory`)
plus, at every forward, the activations (and stashed weights) its passes hold —
:func:`~clustersim.schedules.compiler.pass_memory`, the compiler's own rule — so it equals
:func:`clustersim.experiments.memory.tightest_fit` wherever the uniform pipeline compiler
runs without FSDP units; other modes (parameter servers, stage replicas, inference, mixed
GPUs, ZeRO-3 with ``parallel.data_parallel``) take that exact replay instead.

The time is an estimate (tests/test_search_estimate.py states its bound against the
simulation); a search ranks by it and simulates only the best ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..collectives.group import resolve_alpha
from ..collectives.protocol import resolve_protocols
from ..collectives.registry import plan as collective_plan
from ..hardware.node_groups import device_memory, heterogeneity
from ..modes import mode_of
from ..resolve import Job, resolve
from ..scenario import Scenario
from ..schedules.compiler import pass_memory, pass_segments, stage_static_memory
from ..schedules.orders import run_orders, stage_chunks
from ..schedules.registry import SCHEDULES, Schedule
from ..topology.servers import nics_per_node
from .memory import tightest_fit


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
        for d in devices:
            self.hosts.setdefault(d // gpn, []).append(d)
        self._shape = {**shape, "nodes": len(self.hosts)}
        if len(self.hosts) == 1:
            self._shape = {k: v for k, v in self._shape.items() if not k.endswith("_inter")}

    def shape(self) -> dict[str, Any]:
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
        self._seen: dict[tuple, float] = {}

    def collective(self, kind: str, devices: tuple[int, ...], nbytes: float) -> float:
        """Idle-network seconds of collective ``kind`` of ``nbytes`` over ``devices``."""
        if len(devices) <= 1:
            return 0.0
        key = (kind, tuple(d // self.gpn for d in devices), nbytes)  # its hosts are its shape
        if key not in self._seen:
            self._seen[key] = self._collective(kind, devices, nbytes)
        return self._seen[key]

    def _collective(self, kind: str, devices: tuple[int, ...], nbytes: float) -> float:
        per_host = max(1, sum(1 for d in devices if d // self.gpn == devices[0] // self.gpn))
        shape = {**self.shape, "bw_inter": self.nic_bw * min(self.nics, per_host) / per_host}
        group = _Host(devices, self.gpn, shape, self.protocols)
        # the engine's choice and time: least protocol latency + α-β on the protocol's wire bytes
        return collective_plan(group, kind, int(nbytes), self.algorithms.get(kind) or "auto")[2]

    def send(self, a: int, b: int, nbytes: float) -> float:
        """A point-to-point message from device ``a`` to ``b`` (latency + bytes / bandwidth)."""
        if a // self.gpn == b // self.gpn:
            return self.intra_lat + nbytes / self.intra_bw
        return self.nic_lat + nbytes / self.nic_bw


def _bubble(schedule: Schedule, p: int, v: int, f: float, b: float, w: float) -> float:
    """The schedule's bubble (module docstring). ``f``, ``b``, ``w``: the F, B and W per
    micro-batch summed over the stages other than the slowest — the fill and drain pass
    through each of them once — so on p equal stages ``f`` is (p − 1)·t_F."""
    if p == 1:
        return 0.0
    name = schedule.name
    if name == "interleaved":
        return (f + b + w) / v
    if name == "zb_h1":
        return max(0.0, f + b - w)
    if name == "zb_h2":
        return max(0.0, f + b - 2 * w)
    if name == "zb_v":  # two half-stage chunks per stage
        return max(0.0, f + b - 2 * w) / 2
    if name == "dualpipe":  # a micro-batch visits one of the stage's two copies
        return (p / 2 - 1) / (p - 1) * max(0.0, f + 2 * b - 2 * w)
    if name == "dualpipe_v":
        return max(0.0, f + 2 * b - 2 * w) / 2
    return f + b + w


class Estimator:
    """Estimates plans of one search (:class:`PlanEstimate`), caching what plans share:
    chunk costs and pass times by everything but the schedule, and each schedule shape's
    memory profile by (schedule, p, m, v)."""

    def __init__(self) -> None:
        self._priced: dict[tuple, tuple[Job, list[dict[str, float]]]] = {}
        self._profiles: dict[tuple, tuple[bool, list[list[tuple[int, ...]]]]] = {}
        self._networks: dict[int, _Network] = {}

    def estimate(self, sc: Scenario, plan: Mapping[str, Any]) -> PlanEstimate:
        """The estimate of plan ``plan`` (the override dict ``sc`` was loaded from)."""
        schedule = SCHEDULES[sc.parallel.schedule]
        v = sc.parallel.virtual_stages
        own = ("parallel.schedule", "parallel.virtual_stages")  # the costs see them as the chunk counts
        key = tuple(sorted((k, repr(x)) for k, x in plan.items() if k not in own))
        key += (schedule.model_chunks(sc.parallel.pp, v), schedule.directions, v)
        if key not in self._priced:
            job = resolve(sc)
            self._priced[key] = (job, [self._pass_times(job, c) for c in job.chunk_costs])
        job, times = self._priced[key]  # the costs of a plan that may differ in its schedule
        m = sc.num_microbatches
        split, paired, vectors = self._profile(schedule, job.plan.pp, m, v, sc.simulation.iterations)
        if self._fast_memory(job):
            memory, capacity = self._memory(job, schedule, vectors)
        else:
            memory, capacity = tightest_fit(job if job.schedule is schedule else resolve(sc))
        return self._time(job, schedule, times, split, paired, m, self._network(job), memory, capacity)

    # ---- memory -----------------------------------------------------------------------------

    @staticmethod
    def _fast_memory(job: Job) -> bool:
        """Whether the order replay equals the compiled ledger (module docstring)."""
        fsdp = job.parallel.data_parallel is not None and job.parallel.zero == 3
        return (
            mode_of(job).name == "pipeline"
            and job.replicas is None
            and heterogeneity(job.cluster) is None
            and not fsdp
        )

    def _profile(self, schedule: Schedule, p: int, m: int, v: int, iterations: int):
        """(whether the order splits backwards, per stage the share of its forwards run in
        an overlapped F&B pair, per stage the live (activations, stashed weights) counts
        per local chunk at each forward that can set the peak)."""
        key = (schedule.name, p, m, v, 1 if schedule.flush else iterations)
        if key not in self._profiles:
            orders = run_orders(schedule, p, m, v, key[-1])
            split = any(ph == "W" for order in orders for ph, _, _ in order)
            paired = [len(order.pairs) / max(1, sum(ph == "F" for ph, _, _ in order)) for order in orders]
            vectors = [_live_vectors(schedule, order, s, p, v) for s, order in enumerate(orders)]
            self._profiles[key] = (split, paired, vectors)
        return self._profiles[key]

    @staticmethod
    def _memory(job: Job, schedule: Schedule, vectors) -> tuple[float, float]:
        costs, p, v = job.chunk_costs, job.plan.pp, job.parallel.virtual_stages
        stash = schedule.weights == "stash"
        peak = 0.0
        for s in range(p):
            chunks = [costs[k] for k in stage_chunks(schedule, s, p, v)]
            static = stage_static_memory(schedule, chunks).total
            held = [(c.activation_memory, c.weight_bytes if stash else 0) for c in chunks]
            live = max((sum(n * b for n, b in zip(vec, _flat(held))) for vec in vectors[s]), default=0)
            peak = max(peak, static + live)
        return peak, device_memory(job.cluster, 1, job.num_gpus)[0]

    # ---- time ---------------------------------------------------------------------------------

    def _network(self, job: Job) -> _Network:
        n = job.num_gpus
        if n not in self._networks:
            self._networks[n] = _Network(job)
        return self._networks[n]

    def _pass_times(self, job: Job, cost) -> dict[str, float]:
        net = self._network(job)
        groups = _groups(job)
        out = {}
        for phase, split in (("F", False), ("B", False), ("Bi", True), ("W", True)):
            segs = pass_segments(cost, phase[0], split, job.plan.pp > 1)
            out[phase] = _segments_time(segs, groups, net)
            # the pass's communication: what an overlapped F&B pair can hide under the other's compute
            # (a ring's attention chunks and an overlap's GEMM are compute: only what outlasts them is not)
            compute = sum(g.duration for g in segs if g.kind != "collective")
            out[phase + " comm"] = max(0.0, out[phase] - compute)
        return out

    def _time(self, job, schedule, times, split, paired, m, net, memory, capacity) -> PlanEstimate:
        plan, p, v = job.plan, job.plan.pp, job.parallel.virtual_stages
        d = schedule.directions
        per_stage = []
        for s in range(p):
            ks = stage_chunks(schedule, s, p, v)
            f = sum(times[k]["F"] for k in ks) / d
            b = sum(times[k]["Bi" if split else "B"] for k in ks) / d
            w = sum(times[k]["W"] for k in ks) / d if split else 0.0
            per_stage.append((f + b + w - paired[s] * _hidden(times, ks, d), f, b, w, s))
        total, *_, slow = max(per_stage)
        others = [x for x in per_stage if x[-1] != slow]
        bubble = _bubble(schedule, p, v, *(sum(x[i] for x in others) for i in (1, 2, 3)))
        costs = job.chunk_costs
        hops = 0.0
        if p > 1:  # a micro-batch's route down and back: each chunk boundary between two stages
            route = schedule.route(0, len(costs))
            cross = [(schedule.stage_of(k, p), schedule.stage_of(k + 1, p)) for k in route[:-1]]
            nbytes = max(c.activation_bytes for c in costs)
            hops = 2 * sum(net.send(plan.device(a), plan.device(b), nbytes) for a, b in cross if a != b)
        sync, optimizer = 0.0, 0.0
        overlap = job.parallel.data_parallel is not None and job.parallel.data_parallel.overlap_grad_reduce
        for s in range(p):
            ks = stage_chunks(schedule, s, p, v)
            t_sync = 0.0
            if plan.replicas > 1 or d > 1:
                mirror = p - 1 - s if d > 1 else s
                group = tuple(sorted({*plan.dp_group(s), *plan.dp_group(mirror)}))
                t_sync = net.collective("all_reduce", group, sum(costs[k].gradient_bytes for k in ks))
            expert = sum(costs[k].expert_grad_bytes for k in ks)
            if expert and plan.edp > 1:
                t_sync += net.collective("all_reduce", plan.expert_group(plan.device(s), "edp"), expert)
            if overlap:
                t_sync = max(0.0, t_sync - per_stage[s][2] - per_stage[s][3])
            sync = max(sync, t_sync)
            optimizer = max(
                optimizer, sum(costs[k].optimizer + costs[k].unscale + costs[k].grad_norm for k in ks)
            )
        compute = m * total
        comm = hops + sync
        return PlanEstimate(compute + bubble + comm + optimizer, compute, bubble, comm, memory, capacity)


def _hidden(times: list[dict[str, float]], chunks: list[int], d: int) -> float:
    """Seconds an overlapped F&B pair hides per micro-batch on a stage holding ``chunks``:
    each pass's communication, as far as the other pass has compute to run beside it
    (:mod:`clustersim.schedules.overlap`)."""
    f = sum(times[k]["F"] for k in chunks) / d
    fc = sum(times[k]["F comm"] for k in chunks) / d
    b = sum(times[k]["B"] for k in chunks) / d
    bc = sum(times[k]["B comm"] for k in chunks) / d
    return min(fc, b - bc) + min(bc, f - fc)


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
    """Seconds of one pass's segments run one after another; a compute segment marked
    ``overlap`` beside its neighbouring collective takes the longer of the two."""
    times = [_segment_time(seg, groups, net) for seg in segs]
    total, k = 0.0, 0
    while k < len(segs):
        a = segs[k]
        b = segs[k + 1] if k + 1 < len(segs) else None
        if b is not None and k + 2 < len(segs) and _beside(a, b):
            total += max(times[k], times[k + 1])
            k += 2
        else:
            total += times[k]
            k += 1
    return total


def _beside(a, b) -> bool:
    return (a.overlap and b.kind == "collective") or (a.kind == "collective" and b.overlap)


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
    comm = net.collective(seg.collective, group, seg.nbytes)  # a GEMM-collective pipeline
    return max(seg.duration, comm) + min(seg.duration, comm) / max(1, seg.chunks)
