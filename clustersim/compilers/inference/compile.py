"""Forward-only pipelines (inference): requests flow through the stages, nothing flows back.

``training.mode: inference`` compiles to this Program instead of a training schedule.
Every micro-batch is one request; with dp replicas, request q goes to replica q mod dp
as that replica's request q div dp. Per replica, the pipeline compiler's own emission
(:func:`clustersim.compilers.pipeline.passes.emit_pass` and its send/recv wiring) runs an order
of forwards only, in request order, on every stage — no backward, no gradient
all-reduce, no optimizer step. On top of it this module sets:

* **memory** — weights only as static memory (no gradients, no optimizer state), and per
  request the boundary tensors in flight: a forward allocates its output
  (``activation_bytes``) when it starts and frees its input when it ends; the output is
  freed when its send has delivered it (on the last stage, when the forward ends); a
  recv allocates the arriving input when it lands. A request thus holds memory on a
  stage from the arrival of its input until its output has left — queued inputs at a
  bottleneck stage pile up. Activations kept for a backward do not exist, and the
  transient buffers inside a running forward are not modelled.
* **arrivals** — a request's first forward may not start before it arrives. Each
  replica has an ``arrival`` lane on its first-stage GPU (TP rank 0) holding one compute
  op per request, in order, whose duration is the gap since the previous arrival; the
  request's first forward segment on every TP rank depends on it. Lane order then ends
  op j exactly at request j's arrival time — the engine needs no notion of "start at
  time t". Arrival ops carry no FLOPs and no speed factors (stragglers, noise) apply.
"""

from __future__ import annotations

import numpy as np

from ...memory_kinds import StaticMemory
from ...parallel.plan import Plan
from ...program import ARRIVAL_LANE, COMPUTE, RECV, SEND, Op, Program
from ...schedules.registry import Schedule
from ...workload.stage_cost import StageCost
from ..pipeline.compile import emit_replica
from ..pipeline.context import CompileContext

#: the per-stage order of a forward-only pipeline: every request's forward, in request order
FORWARD_ONLY = Schedule(
    "forward_only",
    "forward passes only, in request order (inference)",
    factory=lambda stage, p, m: [("F", j) for j in range(m)],
)


def arrival_times(arrival, n: int, seed: int) -> list[float]:
    """Arrival time (s) of each of ``n`` requests under a ``training.arrival`` spec (None:
    all at 0). Request 0 arrives at 0; gaps are ``interval`` (constant) or exponential of
    mean 1/``rate`` drawn from ``default_rng([seed, 0])`` (poisson)."""
    if arrival is None or n == 0:
        return [0.0] * n
    if arrival.process == "constant":
        gaps = [arrival.interval] * (n - 1)
    else:
        # a stream of its own: compute noise draws from default_rng(seed), stragglers from [seed, k + 1]
        gaps = np.random.default_rng([seed, 0]).exponential(1.0 / arrival.rate, n - 1).tolist()
    times = [0.0]
    for g in gaps:  # summed one by one, as the engine advances the arrival lane
        times.append(times[-1] + g)
    return times


def compile_inference(
    plan: Plan, costs: list[StageCost], m: int, arrivals: list[float], replicas: list | None = None
) -> Program:
    """The Program serving ``m`` requests per replica (``plan.dp`` replicas, one model chunk
    per stage, ``costs`` per stage); ``arrivals`` holds all m·dp requests' arrival times.
    ``replicas`` (mixed GPU types): per replica a :class:`~clustersim.parallel.hetero.ReplicaWork`
    whose costs price each stage on its own GPUs, used instead of ``costs``."""
    p = plan.pp
    prog = Program(plan.num_devices)
    for dev in range(plan.num_devices):
        prog.static_memory[dev] = StaticMemory(weights=costs[plan.coords(dev)[0]].weight_bytes)
    orders = [[(ph, j, s) for ph, j in FORWARD_ONLY.order(s, p, m)] for s in range(p)]
    for r in range(plan.dp):
        begin = len(prog.ops)
        mine = replicas[r].costs if replicas else costs
        emit_replica(CompileContext(FORWARD_ONLY, plan, mine, m, prog=prog), orders, r)
        firsts = _set_memory(prog.ops[begin:], mine, p)
        _emit_arrivals(prog, plan, r, [arrivals[j * plan.dp + r] for j in range(m)], firsts)
    return prog


def _set_memory(ops: list[Op], costs: list[StageCost], p: int) -> dict[tuple[int, int], Op]:
    """Apply the boundary-tensor memory model (module docstring) to one replica's ops;
    return the first op of every forward, keyed by (device, request)."""
    first: dict[tuple[int, int], Op] = {}
    last: dict[tuple[int, int], Op] = {}
    for op in ops:
        if op.kind == SEND:
            op.mem_free = op.nbytes
        elif op.kind == RECV:
            op.mem_alloc = op.nbytes
        elif op.phase == "F":  # a segment of a forward (compute or TP collective); ids grow along the pass
            key = (op.device, op.microbatch)
            first.setdefault(key, op)
            last[key] = op
    for key, op in first.items():
        s = op.stage
        out_bytes = costs[s].activation_bytes
        op.mem_alloc = out_bytes
        last[key].mem_free = (costs[s - 1].activation_bytes if s > 0 else 0) + (
            out_bytes if s == p - 1 else 0
        )
    return first


def _emit_arrivals(
    prog: Program, plan: Plan, r: int, times: list[float], firsts: dict[tuple[int, int], Op]
) -> None:
    now = 0.0
    for j, t in enumerate(times):
        gap = t - now
        op = prog.add(
            plan.device(0, r, 0), ARRIVAL_LANE, COMPUTE, "arrival", stage=0, microbatch=j, duration=gap
        )
        now += gap
        for q in range(plan.tp):
            fwd = firsts[(plan.device(0, r, q), j)]
            fwd.deps = fwd.deps + (op.id,)
