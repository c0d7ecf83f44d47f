"""Pipelines whose stages have their own replication (PipeDream's "15-1" plans).

``parallel.stage_replicas = [r_0, r_1, ...]`` gives stage s its own r_s GPUs, numbered
consecutively (stage 0 on devices 0..r_0−1, stage 1 on the next r_1, …). As in PipeDream
(SOSP'19 §3.2, "1F1B-RR"), micro-batch j runs on replica ``j % r_s`` of stage s, so its
activations go from replica ``j % r_s`` of stage s to replica ``j % r_{s+1}`` of stage
s+1 and its gradients come back the same way.

Each replica runs the schedule's order for its stage (:func:`.orders.run_orders`, the
same orders the uniform compiler uses) filtered to its own micro-batches, and every pass
is emitted by :func:`.compiler.emit_pass`. Filtering keeps each replica's order a
subsequence of the stage's order, so a deadlock-free schedule stays deadlock-free.

Weight updates: a flushing schedule's optimizer step (one per iteration) runs on every
replica, after a gradient all-reduce over the stage's r_s replicas (when r_s > 1), on
the ``comm`` lane as the uniform data-parallel all-reduce. A flush-free schedule's
updates are merged so that each update holds a micro-batch of every replica (PipeDream's
replicated stages synchronise as data parallelism does): ``pipedream``'s per-micro-batch
steps become one step per r_s micro-batches; each replica takes the merged step where the
stage's order has its last update, together with the others (the run's last update also
closes any remainder).
"""

from __future__ import annotations

from ...errors import ProgramError
from ...parallel.replica_layout import ReplicaLayout
from ...program import Op, Program
from ...schedules.orders import run_orders
from ...schedules.registry import Schedule, replicable_schedules
from ...workload.pass_costs import pass_memory, pass_transfers, stage_static_memory
from ...workload.stage_cost import StageCost
from ..pipeline.gradient_sync import GradientEmitter, emit_gradient_allreduce
from ..pipeline.passes import Gpu, PassWork, emit_pass
from ..pipeline.wiring import Wiring, emit_optimizer


def merged_updates(schedule: Schedule, order: list[tuple[str, int, int]], r: int, m: int) -> dict[int, tuple]:
    """Positions of the stage order's ``O`` items that stay, each → (update index, iteration).

    Flushing: every step stays. Flush-free: a step stays once the backwards since the
    last kept one cover all r replicas, or when it is the run's last (module docstring).
    The iteration is that of the stage's last pass before the step."""
    kept, covered, it, last_o = {}, set(), 0, max(i for i, x in enumerate(order) if x[0] == "O")
    for pos, (ph, j, _) in enumerate(order):
        if ph != "O":
            if ph != "F":  # gradients computed
                covered.add(j % r)
            it = j // m
        elif schedule.flush or len(covered) == r or pos == last_o:
            kept[pos] = (len(kept), it)
            covered = set()
    return kept


def compile_replicated(
    schedule: Schedule,
    layout: ReplicaLayout,
    costs: list[StageCost],
    m: int,
    iterations: int = 1,
    reserve: list[int] | None = None,
) -> Program:
    """The Program of ``iterations`` iterations of ``schedule`` with per-stage replication.

    ``costs`` holds one entry per stage (one model chunk each); ``reserve`` the bytes each
    stage's GPUs hold besides it (the CUDA context and NCCL's; None: none)."""
    p = layout.pp
    if len(costs) != p or schedule.chunks != 1 or schedule.placement != "loop":
        raise ProgramError(
            f"schedule {schedule.name!r} with stage replicas {list(layout.replicas)}: needs one "
            f"model chunk per stage (got {len(costs)} chunks); accepted schedules: "
            f"{', '.join(replicable_schedules())}"
        )
    schedule.validate(p, m, 1)
    orders = run_orders(schedule, p, m, 1, iterations)
    prog = Program(layout.num_devices)
    reserve = reserve or [0] * p
    for dev in range(layout.num_devices):
        s = layout.coords(dev)[0]
        prog.static_memory[dev] = stage_static_memory(schedule.weights, [costs[s]], reserve[s])
    passes: dict[tuple, tuple[Op, Op]] = {}
    for s, order in enumerate(orders):
        updates = merged_updates(schedule, order, layout.replicas[s], m)
        for i in range(layout.replicas[s]):
            _emit_replica_stage(prog, layout, schedule, costs[s], order, updates, m, s, i, passes)
    _wire_transfers(prog, layout, costs, orders, m, passes)
    return prog


def _emit_replica_stage(
    prog: Program,
    layout: ReplicaLayout,
    schedule: Schedule,
    cost: StageCost,
    order: list,
    updates: dict,
    m: int,
    s: int,
    i: int,
    passes: dict,
) -> None:
    """Replica ``i`` of stage ``s``: its micro-batches' passes and the stage's kept updates."""
    r, dev = layout.replicas[s], layout.device(s, i)
    has_w = {j for ph, j, _ in order if ph == "W"}
    version, fwd_version, last = 0, {}, None
    for pos, (ph, j, _) in enumerate(order):
        if ph == "O":
            if pos not in updates:
                continue
            u, it = updates[pos]
            deps = (last.id,) if last is not None else ()
            label = "" if schedule.flush else f" u{u}"
            if r > 1:
                emit = GradientEmitter(prog, dev, s, it, label)
                tag = f"replica-allreduce it{it} u{u} s{s}"
                deps = emit_gradient_allreduce(
                    emit, layout.group(s), cost.gradient_bytes, tag=tag, deps=deps, compression=None
                )
            last = emit_optimizer(prog, dev, s, it, label, cost.optimizer, deps, version + 1)
            version += 1
            continue
        if j % r != i:
            continue
        split = j in has_w
        if ph == "F":
            fwd_version[j] = version
        alloc, free, stashed = pass_memory(cost, ph, split, schedule.weights == "stash")
        work = PassWork(cost, ph, split and ph == "B", alloc, free, stashed)
        gpu = Gpu(layout, s, i, 0)
        passes[(s, ph, j)] = emit_pass(
            prog, gpu, work, name=f"{ph}{j % m}", mb=j % m, it=j // m, version=fwd_version[j], after=last
        )
        last = passes[(s, ph, j)][1]


def _wire_transfers(
    prog: Program, layout: ReplicaLayout, costs: list[StageCost], orders: list, m: int, passes: dict
) -> None:
    """Sends in producer order and recvs in consumer order, replica to replica."""
    wiring = Wiring(prog, m)
    sends: dict[tuple, Op] = {}
    for s, order in enumerate(orders):
        for ph, j, _ in order:
            sent = pass_transfers(costs, ph, s)[1]  # one chunk per stage: the neighbour chunk is its stage
            if sent is not None:
                to, size = sent
                sends[(to, ph, j)] = wiring.send(passes[(s, ph, j)][1], f"{ph}{j % m}", s, to, j, size)
    for s, order in enumerate(orders):
        for ph, j, _ in order:
            send = sends.get((s, ph, j))
            if send is not None:
                dev = layout.device(s, layout.replica_of(s, j))
                wiring.recv(dev, send, s, j, passes[(s, ph, j)][0])
