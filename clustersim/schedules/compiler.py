"""Compile per-stage schedule orders into a Program (the IR the engine interprets).

For every data-parallel replica r, tensor-parallel rank t and iteration it emits, on the
device of (stage s, r, t):
  * each pass of the schedule's order as its segments: compute segments on the
    ``compute`` lane, tensor-parallel collectives on the ``tp`` lane over the stage's TP
    group, chained so each waits for the previous (as kernels on one stream would); a
    forward allocates the stage's activation memory for its micro-batch and the
    backward frees it;
  * a send after each pass whose output another stage consumes (activations downstream
    after F, gradients upstream after B) to the same TP rank of that stage, in producer
    order on the ``send`` lane;
  * a recv before each pass that consumes another stage's output, in consumer order on
    the ``recv`` lane, and a dependency of that pass on its recv;
  * with dp > 1, a gradient all-reduce per (stage, TP rank) over its data-parallel group
    on the ``comm`` lane after the stage's last backward;
  * the optimizer step, which ends the stage's iteration.
"""

from __future__ import annotations

from ..errors import ProgramError
from ..parallel.plan import Plan
from ..program import COLLECTIVE, COMPUTE, Op, Program
from ..workload.stage_cost import StageCost
from .registry import Schedule


def _check_order(schedule: Schedule, stage: int, order: list[tuple[str, int]], m: int) -> None:
    want = sorted([("F", j) for j in range(m)] + [("B", j) for j in range(m)])
    if sorted(order) != want:
        raise ProgramError(
            f"schedule {schedule.name!r} stage {stage}: the order must hold F and B of every micro-batch "
            f"0..{m - 1} exactly once; got {order[:12]}{' …' if len(order) > 12 else ''}"
        )
    pos = {item: i for i, item in enumerate(order)}
    late = [j for j in range(m) if pos[("B", j)] < pos[("F", j)]]
    if late:
        raise ProgramError(f"schedule {schedule.name!r} stage {stage}: B{late[0]} comes before F{late[0]}")


def compile_pipeline(schedule: Schedule, plan: Plan, costs: list[StageCost], m: int,
                     iterations: int = 1) -> Program:
    """The Program of ``iterations`` training iterations of ``schedule`` under ``plan``."""
    p = plan.pp
    if len(costs) != p:
        raise ProgramError(f"schedule {schedule.name!r} runs one model chunk per stage; got {len(costs)} chunks "
                           f"for {p} stages (parallel.virtual_stages must be 1)")
    orders = [schedule.order(s, p, m) for s in range(p)]
    for s, order in enumerate(orders):
        _check_order(schedule, s, order, m)
    prog = Program(plan.num_devices)
    for dev in range(plan.num_devices):
        prog.static_memory[dev] = costs[plan.coords(dev)[0]].param_bytes
    for it in range(iterations):
        last_backward: dict[int, int] = {}
        optimizers: dict[int, Op] = {}
        for r in range(plan.dp):
            _emit_replica(prog, plan, costs, orders, r, it, last_backward, optimizers)
        for s in range(p):
            for t in range(plan.tp):
                group = plan.dp_group(s, t)
                if len(group) < 2:
                    continue
                for dev in group:
                    op = prog.add(dev, "comm", COLLECTIVE, f"dp all-reduce s{s}", stage=s, iteration=it,
                                  nbytes=costs[s].gradient_bytes, deps=(last_backward[dev],), group=group,
                                  collective="all_reduce", tag=f"dp-allreduce it{it} s{s} t{t}")
                    opt = optimizers[dev]
                    opt.deps = opt.deps + (op.id,)
    return prog


def emit_pass(prog: Program, plan: Plan, cost: StageCost, phase: str, stage: int, r: int, t: int,
              mb: int, it: int) -> tuple[Op, Op]:
    """Emit one pass (its segments) on the device of (stage, r, t); return (first, last) op."""
    dev = plan.device(stage, r, t)
    segments = cost.segments(phase)
    first = last = None
    for k, seg in enumerate(segments):
        deps = (last.id,) if last is not None else ()
        if seg.kind == "compute":
            op = prog.add(dev, "compute", COMPUTE, f"{phase}{mb}", stage=stage, microbatch=mb, phase=phase,
                          iteration=it, duration=seg.duration, flops=seg.flops, deps=deps)
        else:
            group = tuple(plan.device(stage, r, q) for q in range(plan.tp))
            op = prog.add(dev, "tp", COLLECTIVE, seg.name or f"tp {seg.collective}", stage=stage,
                          microbatch=mb, phase=phase, iteration=it, nbytes=seg.nbytes, deps=deps, group=group,
                          collective=seg.collective, tag=f"tp it{it} s{stage} r{r} {phase}{mb} #{k}")
        first = first or op
        last = op
    if phase == "F":
        first.mem_alloc = cost.activation_memory
    elif phase == "B":
        last.mem_free = cost.activation_memory
    return first, last


def _emit_replica(prog: Program, plan: Plan, costs: list[StageCost], orders, r: int, it: int,
                  last_backward: dict[int, int], optimizers: dict) -> None:
    p = plan.pp
    passes: dict[tuple[int, int, str, int], tuple[Op, Op]] = {}
    for s, order in enumerate(orders):
        for t in range(plan.tp):
            dev = plan.device(s, r, t)
            for ph, j in order:
                passes[(s, t, ph, j)] = emit_pass(prog, plan, costs[s], ph, s, r, t, j, it)
                if ph == "B":
                    last_backward[dev] = passes[(s, t, ph, j)][1].id
            optimizers[dev] = prog.add(dev, "compute", COMPUTE, "optimizer", stage=s, phase="O", iteration=it,
                                       duration=costs[s].optimizer)
    sends: dict[tuple[int, int, str, int], Op] = {}
    for s, order in enumerate(orders):
        for t in range(plan.tp):
            for ph, j in order:
                to = s + 1 if ph == "F" else s - 1
                if 0 <= to < p:
                    src = passes[(s, t, ph, j)][1]
                    sends[(to, t, ph, j)] = prog.add(
                        src.device, "send", "send", f"send {ph}{j} s{s}->s{to}", stage=s, microbatch=j,
                        iteration=it, nbytes=costs[s].activation_bytes, deps=(src.id,))
    for s, order in enumerate(orders):
        for t in range(plan.tp):
            dev = plan.device(s, r, t)
            for ph, j in order:
                send = sends.get((s, t, ph, j))
                if send is None:
                    continue
                recv = prog.add(dev, "recv", "recv", f"recv {ph}{j} s{send.stage}->s{s}", stage=s,
                                microbatch=j, iteration=it, nbytes=send.nbytes, peer=send.id)
                send.peer = recv.id
                consumer = passes[(s, t, ph, j)][0]
                consumer.deps = consumer.deps + (recv.id,)
