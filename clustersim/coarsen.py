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

#: in :func:`_sole_dependents`: no op waits on this one / more than one op does
_NONE, _MANY = -1, -2


def _sole_dependents(prog: Program) -> list[int]:
    """Per op: the id of the one op that waits on it (a dep, or a recv on its send),
    _NONE if none does, _MANY if several do."""
    sole = [_NONE] * len(prog.ops)
    for op in prog.ops:
        i = op.id
        waits = (*op.deps, op.peer) if op.kind == RECV else op.deps
        for d in waits:
            s = sole[d]
            sole[d] = i if s == _NONE or s == i else _MANY
    return sole


def _joins(a: Op, b: Op, sole: list[int]) -> bool:
    return (
        a.kind == COMPUTE
        and b.kind == COMPUTE
        and (a.stage, a.microbatch, a.phase, a.iteration) == (b.stage, b.microbatch, b.phase, b.iteration)
        and all(d == a.id for d in b.deps)
        and sole[a.id] in (_NONE, b.id)
        and a.mem_free == 0
        and b.mem_alloc == 0
    )


def coarsen(prog: Program) -> Program:
    """A new Program with every mergeable run of compute ops merged into one op, or
    ``prog`` itself when no two ops merge (e.g. a real model's per-stage cost model,
    which already gives each pass one compute op)."""
    sole = _sole_dependents(prog)
    head_of: dict[int, int] = {}  # old op id → old id of the run's first op
    for lane_ops in prog.lanes().values():
        for a, b in zip(lane_ops, lane_ops[1:]):
            if _joins(a, b, sole):
                head_of[b.id] = head_of.get(a.id, a.id)
    if not head_of:
        return prog
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
            merged.stash_free += op.stash_free
            new_id[op.id] = merged.id
            continue
        copy = out.add(
            op.device,
            op.lane,
            op.kind,
            op.name,
            stage=op.stage,
            microbatch=op.microbatch,
            phase=op.phase,
            iteration=op.iteration,
            duration=op.duration,
            nbytes=op.nbytes,
            flops=op.flops,
            deps=op.deps,
            peer=op.peer,
            mem_alloc=op.mem_alloc,
            mem_free=op.mem_free,
            stash_alloc=op.stash_alloc,
            stash_free=op.stash_free,
            group=op.group,
            collective=op.collective,
            algorithm=op.algorithm,
            tag=op.tag,
            version=op.version,
            arrivals=op.arrivals,
            shadows=op.shadows,
        )
        new_id[op.id] = copy.id
    for op in out.ops:
        op.deps = tuple(dict.fromkeys(new_id[d] for d in op.deps if new_id[d] != op.id))
        if op.peer >= 0:
            op.peer = new_id[op.peer]
    return out
