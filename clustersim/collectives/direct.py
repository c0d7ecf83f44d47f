"""Direct algorithms: every rank talks straight to the ranks that need its data.

* all-to-all: rank i sends S/n to each other rank, in the order i+1, i+2, … (a shifted
  schedule, so at every moment each rank has one receiver);
* all-gather: rank i sends its S/n shard to every other rank;
* reduce-scatter: rank i sends shard j (S/n) to rank j;
* all-reduce: direct reduce-scatter then direct all-gather;
* broadcast: the root sends S to every other rank; reduce: every rank sends S to the root.

Idle time with per-rank bandwidth B (one engine per rank, sends back to back):
``T_A2A = T_AG = T_RS = α + (n−1)/n · S/B``, broadcast/reduce ``α + (n−1)·S/B``.
Best for small groups and for all-to-all (one step, no forwarding).
"""

from __future__ import annotations

from .schedule import Msg, split


def build_direct(env, kind: str, order: list[str], nbytes: int, ready: dict, root=None, chunks=None):
    """Direct schedule for ``kind``; returns (engines, done events per rank)."""
    n = len(order)
    have = {m: tuple(ready.get(m, ())) for m in order}
    if kind == "all_reduce":
        e1, d1 = build_direct(env, "reduce_scatter", order, nbytes, have)
        e2, d2 = build_direct(env, "all_gather", order, nbytes, d1)
        return e1 + e2, d2
    if kind in ("broadcast", "reduce"):
        root = root if root is not None else order[0]
        others = [m for m in order if m != root]
        if kind == "broadcast":
            msgs = [Msg(env, root, m, nbytes, have[root]) for m in others]
            return [msgs], {**have, **{msg.dst: (msg.done,) for msg in msgs}}
        msgs = [Msg(env, m, root, nbytes, have[m]) for m in others]
        return [[msg] for msg in msgs], {**have, root: have[root] + tuple(msg.done for msg in msgs)}
    shard = split(nbytes, n)
    engines, got = [], {m: list(have[m]) if kind == "reduce_scatter" else [] for m in order}
    for i, src in enumerate(order):
        prog = []
        for k in range(1, n):
            j = (i + k) % n
            size = shard[j] if kind == "reduce_scatter" else shard[i]
            msg = Msg(env, src, order[j], size, have[src])
            prog.append(msg)
            got[order[j]].append(msg.done)
        engines.append(prog)
    done = {m: tuple(got[m]) or have[m] for m in order}
    return engines, done
