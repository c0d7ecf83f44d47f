"""Compile per-stage schedule orders into a Program (the IR the engine interprets).

For every data-parallel replica and iteration it emits, per stage device:
  * compute ops in the schedule's order (forward allocates the stage's activation
    memory for that micro-batch, backward frees it);
  * a send after each op whose output another stage consumes (activations downstream
    after F, gradients upstream after B), in producer order on the ``send`` lane;
  * a recv before each op that consumes another stage's output, in consumer order on
    the ``recv`` lane, and a dependency of that op on its recv;
  * with dp > 1, a gradient all-reduce per stage over its data-parallel group on the
    ``comm`` lane after the stage's last backward;
  * the optimizer step, which ends the stage's iteration.
"""

from __future__ import annotations

from ..errors import ProgramError
from ..parallel.plan import Plan
from ..program import COLLECTIVE, COMPUTE, Program
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
    orders = [schedule.order(s, p, m) for s in range(p)]
    for s, order in enumerate(orders):
        _check_order(schedule, s, order, m)
    prog = Program(plan.num_devices)
    for s in range(p):
        for r in range(plan.dp):
            prog.static_memory[plan.device(s, r)] = costs[s].param_bytes
    for it in range(iterations):
        last_backward: dict[int, int] = {}
        optimizers: dict[int, object] = {}
        for r in range(plan.dp):
            _emit_replica(prog, plan, costs, orders, r, it, last_backward, optimizers)
        for s in range(p):
            group = plan.dp_group(s)
            if len(group) < 2:
                continue
            for dev in group:
                op = prog.add(dev, "comm", COLLECTIVE, f"dp all-reduce s{s}", stage=s, iteration=it,
                              nbytes=costs[s].param_bytes, deps=(last_backward[dev],), group=group,
                              collective="all_reduce", tag=f"dp-allreduce it{it} s{s}")
                opt = optimizers[dev]
                opt.deps = opt.deps + (op.id,)
    return prog


def _emit_replica(prog: Program, plan: Plan, costs: list[StageCost], orders, r: int, it: int,
                  last_backward: dict[int, int], optimizers: dict) -> None:
    p = plan.pp
    compute: dict[tuple[int, str, int], object] = {}
    for s, order in enumerate(orders):
        dev, c = plan.device(s, r), costs[s]
        for ph, j in order:
            fwd = ph == "F"
            op = prog.add(dev, "compute", COMPUTE, f"{ph}{j}", stage=s, microbatch=j, phase=ph, iteration=it,
                          duration=c.forward if fwd else c.backward,
                          flops=c.forward_flops if fwd else c.backward_flops,
                          mem_alloc=c.activation_memory if fwd else 0,
                          mem_free=0 if fwd else c.activation_memory)
            compute[(s, ph, j)] = op
            if not fwd:
                last_backward[dev] = op.id
        optimizers[dev] = prog.add(dev, "compute", COMPUTE, "optimizer", stage=s, phase="O", iteration=it,
                                   duration=c.optimizer)
    sends = {}
    for s, order in enumerate(orders):
        for ph, j in order:
            to = s + 1 if ph == "F" else s - 1
            if 0 <= to < p:
                src = compute[(s, ph, j)]
                sends[(to, ph, j)] = prog.add(
                    src.device, "send", "send", f"send {ph}{j} s{s}->s{to}", stage=s, microbatch=j,
                    iteration=it, nbytes=costs[s].activation_bytes, deps=(src.id,))
    for s, order in enumerate(orders):
        dev = plan.device(s, r)
        for ph, j in order:
            send = sends.get((s, ph, j))
            if send is None:
                continue
            recv = prog.add(dev, "recv", "recv", f"recv {ph}{j} s{send.stage}->s{s}", stage=s, microbatch=j,
                            iteration=it, nbytes=send.nbytes, peer=send.id)
            send.peer = recv.id
            consumer = compute[(s, ph, j)]
            consumer.deps = consumer.deps + (recv.id,)
