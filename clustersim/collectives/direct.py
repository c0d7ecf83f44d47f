"""Direct algorithms: every rank talks straight to the ranks that need its data.

* all-to-all: rank i sends S/n to each other rank, in the order i+1, i+2, … (a shifted
  schedule, so at every moment each rank has one receiver); its sends inside its host and
  across the network run as two engines at once, as NCCL's grouped ``ncclSend``/``ncclRecv``
  progress over NVLink and the NIC together;
* all-gather: rank i sends its S/n shard to every other rank;
* reduce-scatter: rank i sends shard j (S/n) to rank j;
* all-reduce: direct reduce-scatter then direct all-gather;
* broadcast: the root sends S to every other rank; reduce: every rank sends S to the root.

Idle time with per-rank bandwidth B (one engine per rank, sends back to back):
``T_A2A = T_AG = T_RS = α + (n−1)/n · S/B``, broadcast/reduce ``α + (n−1)·S/B``; across
N hosts of m ranks, all-to-all ``max(α + (m−1)/n · S/B, α_net + (n−m)/n · S/B_net)``.
Best for small groups and for all-to-all (one step, no forwarding).
"""

from __future__ import annotations

from .algorithm import ALGORITHMS, KINDS, Algorithm
from .cost import Shape
from .schedule import Msg, all_of, split


def build_direct(
    env, kind: str, order: list[str], nbytes: int, ready: dict, root=None, host=None, sizes=None
):
    """Direct schedule for ``kind``; returns (engines, done events per rank). ``host``
    (member → host) splits each rank's all-to-all sends into a same-host and a network
    engine; ``sizes[i][j]``: the bytes rank i sends rank j in an uneven all-to-all."""
    n = len(order)
    have = {m: all_of(ready.get(m, ())) for m in order}
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
        return [[msg] for msg in msgs], {**have, root: all_of(have[root] + tuple(msg.done for msg in msgs))}
    shard = split(nbytes, n)
    engines, got = [], {m: list(have[m]) if kind == "reduce_scatter" else [] for m in order}
    for i, src in enumerate(order):
        prog = []
        for k in range(1, n):
            j = (i + k) % n
            size = sizes[i][j] if sizes else shard[j] if kind == "reduce_scatter" else shard[i]
            msg = Msg(env, src, order[j], size, have[src])
            prog.append(msg)
            got[order[j]].append(msg.done)
        if kind == "all_to_all" and host is not None:
            near = [msg for msg in prog if host[msg.dst] == host[src]]
            engines += [near, [msg for msg in prog if host[msg.dst] != host[src]]]
        else:
            engines.append(prog)
    done = {m: all_of(got[m]) or have[m] for m in order}
    return engines, done


def cost(sh: Shape, kind: str, s: float, _servers: int) -> float:
    """Idle-network α-β time (s) of ``kind`` on ``s`` bytes by direct (symbols: :mod:`.cost`)."""
    n, m = sh.n, sh.m
    a_n, b_n = sh.net
    if kind in ("broadcast", "reduce"):
        return max(sh.alpha, a_n) + (m - 1) * s / sh.bw + (n - m) * s / min(sh.bw, b_n * m)
    if kind == "all_to_all":  # the same-host and network engines run side by side
        return max(sh.alpha + (m - 1) * s / (n * sh.bw), a_n + (n - m) * s / (n * b_n))
    one = max(sh.alpha, a_n) + max((m - 1) * s / (n * sh.bw), (n - m) * s / (n * b_n))
    return 2 * one if kind == "all_reduce" else one


ALGORITHMS.add(
    Algorithm(
        "direct",
        "every rank sends straight to every receiver",
        kinds=frozenset(KINDS),
        factory=lambda g, k, s, o: build_direct(g.env, k, g.members, s, {}, o.root, g.host, o.split),
        cost=cost,
        across_hosts=frozenset({"all_to_all", "broadcast", "reduce"}),
        rank=4,
    )
)
