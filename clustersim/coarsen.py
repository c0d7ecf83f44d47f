"""Coarsening: an exact Program → Program pass that merges runs of compute ops.

Two consecutive ops on one lane merge when nothing can tell them apart in time: both
are compute ops of the same pass (stage, micro-batch, phase, iteration), the second waits
on nothing but the first, nothing but the second waits on the first, and memory moves
only at the run's ends (the first op may allocate, the last may free). The merged op
starts when the first did and lasts the sum of their durations, so every other op's
start and end — and the iteration time — are unchanged, with fewer events to simulate.
Per-layer detail (``simulation.granularity: layer``) is kept by not running this pass.
"""

from __future__ import annotations

from .program import COMPUTE, RECV, Op, Program


def _dependents(prog: Program) -> list[set[int]]:
    out: list[set[int]] = [set() for _ in prog.ops]
    for op in prog.ops:
        for d in op.deps:
            out[d].add(op.id)
        if op.kind == RECV:
            out[op.peer].add(op.id)
    return out


def _joins(a: Op, b: Op, dependents: list[set[int]]) -> bool:
    return (a.kind == COMPUTE and b.kind == COMPUTE
            and (a.stage, a.microbatch, a.phase, a.iteration) == (b.stage, b.microbatch, b.phase, b.iteration)
            and set(b.deps) <= {a.id} and dependents[a.id] <= {b.id}
            and a.mem_free == 0 and b.mem_alloc == 0)


def coarsen(prog: Program) -> Program:
    """A new Program with every mergeable run of compute ops merged into one op."""
    dependents = _dependents(prog)
    head_of: dict[int, int] = {}  # old op id → old id of the run's first op
    for lane_ops in prog.lanes().values():
        for a, b in zip(lane_ops, lane_ops[1:]):
            if _joins(a, b, dependents) and a.mem_free == 0:
                head_of[b.id] = head_of.get(a.id, a.id)
    out = Program(prog.num_devices, prog.device_names)
    out.static_memory = list(prog.static_memory)
    new_id: dict[int, int] = {}
    for op in prog.ops:
        head = head_of.get(op.id)
        if head is not None:
            merged = out.ops[new_id[head]]
            merged.duration += op.duration
            merged.flops += op.flops
            merged.mem_free += op.mem_free
            new_id[op.id] = merged.id
            continue
        copy = out.add(op.device, op.lane, op.kind, op.name, stage=op.stage, microbatch=op.microbatch,
                       phase=op.phase, iteration=op.iteration, duration=op.duration, nbytes=op.nbytes,
                       flops=op.flops, deps=op.deps, peer=op.peer, mem_alloc=op.mem_alloc, mem_free=op.mem_free,
                       group=op.group, collective=op.collective, algorithm=op.algorithm, tag=op.tag,
                       version=op.version, arrivals=op.arrivals, shadows=op.shadows)
        new_id[op.id] = copy.id
    for op in out.ops:
        op.deps = tuple(dict.fromkeys(new_id[d] for d in op.deps if new_id[d] != op.id))
        if op.peer >= 0:
            op.peer = new_id[op.peer]
    return out
