"""Coarsening: an exact Program → Program pass that merges runs of compute ops.

Two consecutive ops on one lane merge when nothing can tell them apart in time: both
are compute ops of the same pass (stage, micro-batch, phase, iteration), the second waits
on nothing but the first, nothing but the second waits on the first, and memory moves
only at the run's ends (the first op may allocate, the last may free). The merged op
starts when the first did and lasts the sum of their durations, so every other op's
start and end — and the iteration time — are unchanged, with fewer events to simulate.
(Ops priced kernel by kernel beside NCCL collectives, :attr:`Op.beside`, merge into their
time-weighted factor: exact while the collectives beside the run do not change.)
Per-layer detail (``simulation.granularity: layer``) is kept by not running this pass.

Which ops merge is worked out over columns of the ops (numpy); the new Program's ops are
then made field by field, without :meth:`Program.add`'s keyword handling per op.
"""

from __future__ import annotations

import sys
from itertools import chain
from operator import attrgetter

import numpy as np

from .program import COMPUTE, RECV, Op, Program, beside_sum

_ID, _KIND, _DEPS, _PEER = map(attrgetter, ("id", "kind", "deps", "peer"))
_PASS = attrgetter("stage", "microbatch", "phase", "iteration")
_MEM_ALLOC, _MEM_FREE = attrgetter("mem_alloc"), attrgetter("mem_free")


def _heads(prog: Program, deps: list[tuple[int, ...]]) -> np.ndarray | None:
    """Per op id: the id of the first op of the run it merges into (itself when it heads
    a run or merges with nothing), or None when no two ops merge. ``deps``: each op's."""
    ops, n = prog.ops, len(prog.ops)
    lanes = prog.lanes().values()
    order = np.fromiter(map(_ID, chain.from_iterable(lanes)), np.int64, n)  # ops lane by lane
    first = np.zeros(n, bool)  # whether order[k] is its lane's first op
    first[np.cumsum([0, *map(len, lanes)][:-1])] = True
    a, b = order[:-1], order[1:]  # each op and the next on its lane (where ~first[1:])
    before = np.full(n, -1, np.int64)
    before[b[~first[1:]]] = a[~first[1:]]
    after = np.full(n, -1, np.int64)
    after[a[~first[1:]]] = b[~first[1:]]
    # who waits on whom: the deps, and a recv on its send
    waiter = np.repeat(np.arange(n, dtype=np.int64), np.fromiter(map(len, deps), np.int64, n))
    waited = np.fromiter(chain.from_iterable(deps), np.int64, len(waiter))
    kinds = list(map(_KIND, ops))
    recvs = np.array([i for i, k in enumerate(kinds) if k == RECV], np.int64)
    sends = np.fromiter(map(_PEER, map(ops.__getitem__, recvs.tolist())), np.int64, len(recvs))
    waits_other = np.zeros(n, bool)  # it waits on an op other than the one before it
    waits_other[waiter[waited != before[waiter]]] = True
    waiter, waited = np.concatenate((waiter, recvs)), np.concatenate((waited, sends))
    awaited_other = np.zeros(n, bool)  # an op other than the one after it waits on it
    awaited_other[waited[waiter != after[waited]]] = True
    compute = np.array([k == COMPUTE for k in kinds])
    codes: dict[tuple, int] = {}
    passes = np.fromiter((codes.setdefault(p, len(codes)) for p in map(_PASS, ops)), np.int64, n)
    alloc = np.fromiter(map(_MEM_ALLOC, ops), float, n)
    free = np.fromiter(map(_MEM_FREE, ops), float, n)
    joins = (
        ~first[1:]
        & compute[a]
        & compute[b]
        & (passes[a] == passes[b])
        & ~waits_other[b]
        & ~awaited_other[a]
        & (free[a] == 0)
        & (alloc[b] == 0)
    )
    if not joins.any():
        return None
    at = np.arange(n)
    at[1:][joins] = 0  # a run's ops take the position of its first op
    heads = np.empty(n, np.int64)
    heads[order] = order[np.maximum.accumulate(at)]
    return heads


def coarsen(prog: Program) -> Program:
    """A new Program with every mergeable run of compute ops merged into one op, or
    ``prog`` itself when no two ops merge (e.g. a real model's per-stage cost model,
    which already gives each pass one compute op)."""
    return merge_runs(prog)[0]


def merge_runs(prog: Program) -> tuple[Program, list[int] | None]:
    """:func:`coarsen`, and per op of ``prog`` the id of the op it became (None: no two
    ops merge, ``prog`` is returned itself)."""
    ops, n = prog.ops, len(prog.ops)
    deps = list(map(_DEPS, ops))
    heads = _heads(prog, deps) if n > 1 else None
    if heads is None:
        return prog, None
    kept = heads == np.arange(n)
    new_id = np.cumsum(kept) - 1
    new_id = new_id[heads]  # a merged op's new id is its run's
    mapped = new_id[np.fromiter(chain.from_iterable(deps), np.int64)].tolist()
    offsets = np.cumsum([0, *map(len, deps)]).tolist()
    ids = new_id.tolist()
    out = Program(prog.num_devices, prog.device_names)
    out.static_memory = list(prog.static_memory)
    copies, lanes = out.ops, out._lanes
    intern = sys.intern
    for i in np.flatnonzero(kept).tolist():
        op, k = ops[i], len(copies)
        lo, hi = offsets[i], offsets[i + 1]
        if hi == lo:
            waits = ()
        elif hi == lo + 1:
            waits = () if mapped[lo] == k else (mapped[lo],)
        else:
            waits = tuple(dict.fromkeys(d for d in mapped[lo:hi] if d != k))
        peer = op.peer
        c = Op.from_row(op.row())  # every field (split too), then what the merge changes
        c.id = k
        c.kind = intern(op.kind)
        c.deps = waits
        c.peer = ids[peer] if peer >= 0 else peer
        c.group = tuple(op.group)
        c.shadows = tuple(op.shadows)
        key = (c.device, c.lane)
        on_lane = lanes.get(key)
        if on_lane is None:
            on_lane = lanes[key] = []
            c.lane_id = len(lanes) - 1
        else:
            c.lane_id = on_lane[0].lane_id
        on_lane.append(c)
        copies.append(c)
    for i in np.flatnonzero(~kept).tolist():  # in op order: each run's durations summed in order
        op, merged = ops[i], copies[ids[i]]
        merged.duration += op.duration
        merged.flops += op.flops
        # kernels priced beside NCCL (Op.beside): the run's sums, its factor their mean
        # weighted by time; a part without them leaves the merged op to the scalar slowdown
        merged.beside = beside_sum(merged.beside, op.beside)
        merged.mem_free += op.mem_free
        merged.stash_free += op.stash_free
    return out, ids
