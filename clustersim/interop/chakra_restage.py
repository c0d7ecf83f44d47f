"""An imported trace replayed at another number of pipeline stages (``model.replay_pp``).

A pipeline trace clustersim exported labels every op with its stage (``clustersim.stage``),
micro-batch, phase (F, B, W; O and unlabelled ops are the step around the passes) and
iteration. Replayed at P' stages, P' dividing the trace's P, stage s' holds traced stages
s'k … s'k + k − 1 (k = P/P'), as a native compile cuts consecutive layers: a micro-batch's
forward on s' is the forwards of its traced stages one after another, in stage order; its
backward (and weight-gradient pass) theirs in reverse; the sends and receives between two
merged stages disappear, a dependency on a receive becoming one on what its send waited
for. The passes run in the order of the trace's own schedule — recognised by comparing
every traced stage's pass order with the registered flush schedules' (1F1B, GPipe, …) at P
stages — at P' stages. Ops around the passes (gradient norm, optimizer, data-parallel
collectives) keep their place, the merged stages' taken in turn. A collective whose
members land on one device keeps one op there (the first stage's, waiting for every
member's dependencies; none when the whole group is one device): a within-replica group
such as the gradient-norm all-reduce shrinks to the new stages, a data-parallel group keeps
its replicas. Compute times, bytes and memory moves are the trace's: what a merged stage's
ops cost is the sum of its traced stages' — a per-pass host overhead (``framework F0``)
counted once per traced stage — and its static memory the sum of theirs.

Refused, with the reason (:class:`ScenarioError` on ``model.replay_pp``): ops without a
``clustersim.stage`` label (their stages cannot be told apart), a rank holding several
stages, a pass order no registered flush schedule gives (an interleaved schedule's), a
send without the pass it carries, and a P' that neither divides P nor is a multiple of it.
More stages than the trace's split its stages where its ops carry layer labels
(:mod:`.chakra_split`, which refuses a trace without them). Otherwise as
:mod:`.chakra_rescale` refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import NoReturn

from ..errors import ScenarioError
from ..memory_kinds import StaticMemory
from ..program import COLLECTIVE, RECV, SEND, Op, Program
from .chakra_rescale import check_replayable, rank_layout, replica_ranks
from .chakra_split import split_stages

FIELD = "model.replay_pp"
_PASSES = ("F", "B", "W")
#: ``order(stage, p, m)``: a stage's passes as ``(phase, micro-batch)`` items (a schedule's)
OrderFn = Callable[[int, int, int], list]


def replay_at_pp(
    prog: Program, pp: int, schedules: Mapping[str, OrderFn], layers: dict | None = None
) -> Program:
    """``prog`` replayed at ``pp`` pipeline stages, its passes ordered by whichever of
    ``schedules`` gives the trace's own order (module docstring); a multiple of the trace's
    stages splits them (:mod:`.chakra_split`, ``layers``: the trace's layer table,
    :func:`.chakra_split.table_of`)."""
    refuse = partial(_refuse, pp)
    _check_labels(prog, refuse)
    check_replayable(prog, refuse)
    replicas = replica_ranks(prog, refuse)
    place = rank_layout(replicas, refuse)
    depth = len(replicas[0])
    if depth % pp and pp % depth:
        refuse(
            f"{pp} stages neither each take a whole number of the trace's {depth} nor split each of them "
            f"into a whole number; accepted: a divisor or a multiple of {depth}"
        )
    passes = [_pass_of(prog, op, refuse) for op in prog.ops]
    m = max(op.microbatch for op in prog.ops) + 1
    order = _schedule(prog, replicas, passes, schedules, m, refuse)
    if pp > depth:
        return split_stages(prog, pp, passes, order, replicas, place, layers, refuse)
    k = depth // pp
    position = {rank: p for ranks in replicas for p, rank in enumerate(ranks)}
    device = {
        rank: place(j, p // k, len(replicas), pp)
        for j, ranks in enumerate(replicas)
        for p, rank in enumerate(ranks)
    }
    slot = [{item: i for i, item in enumerate(map(tuple, order(s, pp, m)))} for s in range(pp)]
    kept, deps = _fuse(prog, device, position)
    keys = _keys(prog, deps, passes, position, k, slot)
    ops = sorted(kept, key=lambda i: (device[prog.ops[i].device], prog.ops[i].lane, keys[i]))
    new_id = {old: new for new, old in enumerate(ops)}
    out = Program(len(replicas) * pp)
    for old in ops:
        op = prog.ops[old]
        copy = Op.from_row(op.row())
        copy.id, copy.device, copy.stage = new_id[old], device[op.device], position[op.device] // k
        copy.deps = tuple(new_id[d] for d in deps[old])
        if op.kind in (SEND, RECV):
            copy.peer = new_id[op.peer]
        if op.kind == COLLECTIVE:
            copy.group = tuple(dict.fromkeys(device[r] for r in op.group))
        out.append(copy)
    out.static_memory = [
        StaticMemory.sum(prog.static_memory[r] for r, d in device.items() if d == new)
        for new in range(out.num_devices)
    ]
    out.check()
    return out


def _check_labels(prog: Program, refuse: Callable[[str], NoReturn]) -> None:
    """Refuse a trace whose ops carry no stage label, or a rank holding several stages."""
    stages: dict[int, set] = {}
    for op in prog.ops:
        if op.stage < 0:
            refuse(
                f"op {op.name!r} (rank {op.device}) carries no clustersim.stage label, so the trace's "
                "pipeline stages cannot be told apart; accepted: a trace clustersim exported"
            )
        stages.setdefault(op.device, set()).add(op.stage)
    for rank, held in stages.items():
        if len(held) > 1:
            refuse(
                f"rank {rank} holds stages {sorted(held)} (an interleaved schedule's chunks); accepted: one each"
            )


def _pass_of(prog: Program, op: Op, refuse: Callable[[str], NoReturn]) -> tuple | None:
    """``(iteration, phase, micro-batch)`` of the pass ``op`` belongs to — a send or receive
    that of the pass its send waits for — or None for an op around the passes."""
    if op.kind in (SEND, RECV):
        send = op if op.kind == SEND else prog.ops[op.peer]
        found = [_pass_of(prog, prog.ops[d], refuse) for d in send.deps]
        if not any(found):
            refuse(f"{op.kind} {op.name!r} (rank {op.device}) waits for no pass, so its place is unknown")
        return next(p for p in found if p)
    if op.phase in _PASSES and op.microbatch >= 0:
        return op.iteration, op.phase, op.microbatch
    return None


def _schedule(prog, replicas, passes, schedules, m: int, refuse) -> OrderFn:
    """The order function of ``schedules`` that gives every traced stage's pass order."""
    seen: dict[int, list] = {}
    for op, p in zip(prog.ops, passes):
        if p and op.kind not in (SEND, RECV) and p[0] == 0 and p[1:] not in seen.setdefault(op.device, []):
            seen[op.device].append(p[1:])
    depth = len(replicas[0])
    for order in schedules.values():
        if all(
            [tuple(item) for item in order(s, depth, m)] == seen.get(rank, [])
            for ranks in replicas
            for s, rank in enumerate(ranks)
        ):
            return order
    rank = replicas[0][0]
    return refuse(
        f"rank {rank}'s passes run in the order {seen.get(rank, [])[:8]}…, which none of the schedules "
        f"{sorted(schedules)} gives at {depth} stages and {m} micro-batches"
    )


def _fuse(prog: Program, device: dict, position: dict) -> tuple[list[int], dict[int, tuple]]:
    """The ops kept, and each one's dependencies: a send and receive between merged stages
    dropped (waiting on them is waiting on what the send waited for), a collective keeping
    one member per device (the first stage's, waiting for every member's dependencies); a
    dependency on the op just before on the traced lane is dropped (the new lane order
    stands in for it: the trace states the old order both ways)."""
    stands_for: dict[int, tuple] = {}  # dropped op → the ops waiting on it waits on instead
    extra: dict[int, list] = {}
    for op in prog.ops:
        if op.kind == SEND and device[op.device] == device[prog.ops[op.peer].device]:
            stands_for[op.id] = stands_for[op.peer] = op.deps
    members: dict[str, list[Op]] = {}
    for op in prog.ops:
        if op.kind == COLLECTIVE:
            members.setdefault(op.tag, []).append(op)
    for group in members.values():
        if len({device[op.device] for op in group}) == 1:
            every = tuple(d for op in group for d in op.deps)
            stands_for.update((op.id, every) for op in group)
            continue
        first: dict[int, Op] = {}
        for op in sorted(group, key=lambda o: position[o.device]):
            keep = first.setdefault(device[op.device], op)
            if keep is not op:
                stands_for[op.id] = (keep.id,)
                extra.setdefault(keep.id, []).extend(op.deps)

    def resolve(ids) -> list[int]:
        out = []
        for d in ids:
            out += resolve(stands_for[d]) if d in stands_for else [d]
        return out

    ahead = {}  # op → the op before it on its traced lane: a dependency the new order replaces
    for ids in prog.lanes().values():
        ahead.update((b.id, a.id) for a, b in zip(ids, ids[1:]))
    kept = [op.id for op in prog.ops if op.id not in stands_for]
    deps = {}
    for i in kept:
        waits = [d for d in prog.ops[i].deps if d != ahead.get(i)] + extra.get(i, [])
        deps[i] = tuple(dict.fromkeys(resolve(waits)))
    return kept, deps


def _keys(prog: Program, deps: dict[int, tuple], passes, position: dict, k: int, slot: list[dict]) -> dict:
    """Each kept op's place on its new lane: a pass op by its pass's slot in the new
    schedule, then its traced stage (ascending for a forward, descending for a backward),
    then its traced place; an op around the passes (before or after its lane's passes) by
    its depth — the longest chain of dependencies leading to it, its traced lane order
    included — then its traced stage and place."""
    depth = _depths(prog, deps)
    keys = {}
    for (rank, _), ops in prog.lanes().items():
        sub, stage = position[rank] % k, position[rank] // k
        before = True
        for i, op in enumerate(ops):
            p = passes[op.id]
            if op.id not in deps:
                continue
            if p is None:
                keys[op.id] = (op.iteration, 0 if before else 2, depth[op.id], sub, i)
                continue
            before = False
            turn = sub if p[1] == "F" else k - 1 - sub
            keys[op.id] = (p[0], 1, slot[stage][p[1:]], turn, i)
    return keys


def _depths(prog: Program, deps: dict[int, tuple]) -> dict[int, int]:
    """The longest chain of dependencies to each kept op: a dependency adds one, the op
    before on the traced lane none (Kahn's order over both)."""
    edges: dict[int, list[tuple[int, int]]] = {i: [] for i in deps}
    waiting = dict.fromkeys(deps, 0)
    for ops in prog.lanes().values():
        lane = [op.id for op in ops if op.id in deps]
        for a, b in zip(lane, lane[1:]):
            edges[a].append((b, 0))
            waiting[b] += 1
    for i, ds in deps.items():
        for d in ds:
            edges[d].append((i, 1))
            waiting[i] += 1
    depth = dict.fromkeys(deps, 0)
    ready = [i for i, n in waiting.items() if n == 0]
    while ready:
        a = ready.pop()
        for b, step in edges[a]:
            depth[b] = max(depth[b], depth[a] + step)
            waiting[b] -= 1
            if not waiting[b]:
                ready.append(b)
    return depth


def _refuse(pp: int, why: str) -> NoReturn:
    raise ScenarioError(FIELD, pp, f"the trace cannot be replayed at another pipeline degree: {why}")
