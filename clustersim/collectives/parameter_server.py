"""Parameter-server push/pull (Li et al., OSDI 2014): workers → server(s) → workers.

Every member is a worker. The servers are ``servers`` (any topology nodes, e.g. a CPU
host), else ``[root]``, else the first member. With k servers the buffer is sharded:
each worker pushes S/k to every server; a server, once it has every worker's shard,
sends the reduced shard back to every worker (pull). Idle time with w workers, server
bandwidth B_s and worker bandwidth B_w:
``T ≈ 2·α + S/B_w + 2·w·S/(k·B_s)`` — the server links are the bottleneck, which is the
point of simulating it. Kinds: all_reduce (push + pull), reduce (push only, result on the
servers), broadcast (pull only, from the servers).
"""

from __future__ import annotations

from .algorithm import ALGORITHMS, Algorithm
from .cost import Shape
from .schedule import Msg, all_of, split


def build_parameter_server(
    env, kind: str, order: list[str], nbytes: int, ready: dict, root=None, chunks=None, servers=None
):
    """Push/pull schedule; returns (engines, done events per rank)."""
    servers = list(servers) if servers else [root if root is not None else order[0]]
    shards = split(nbytes, len(servers))
    have = {m: all_of(ready.get(m, ())) for m in {*order, *servers}}
    engines = []
    pushed = {s: list(have[s]) for s in servers}
    if kind in ("all_reduce", "reduce"):
        for w in order:
            prog = [Msg(env, w, s, size, have[w]) for s, size in zip(servers, shards, strict=True) if s != w]
            for msg in prog:
                pushed[msg.dst].append(msg.done)
            engines.append(prog)
        if kind == "reduce":
            return engines, {**have, **{s: all_of(pushed[s]) for s in servers}}
    got = {w: list(have[w]) for w in order}
    for s, size in zip(servers, shards, strict=True):
        gate = all_of(pushed[s])  # one readiness its pulls share: each push read once
        prog = [Msg(env, s, w, size, gate) for w in order if w != s]
        for msg in prog:
            got[msg.dst].append(msg.done)
        engines.append(prog)
    return engines, {**have, **{w: all_of(got[w]) for w in order}}


def never(n: int, per_host: tuple[int, ...]) -> bool:
    """A parameter server needs a server node, which only the caller can name."""
    return False


def cost(sh: Shape, kind: str, s: float, servers: int) -> float:
    """Idle-network α-β time (s) of ``kind`` on ``s`` bytes by parameter_server (symbols: :mod:`.cost`)."""
    a = max(sh.net[0], sh.alpha)
    b = min(sh.bw, sh.net[1] * sh.m) if sh.nodes > 1 else sh.bw
    one = a + (sh.n - 1) * s / (servers * b)
    return 2 * one if kind == "all_reduce" else one


ALGORITHMS.add(
    Algorithm(
        "parameter_server",
        "workers push to server(s), servers push back",
        kinds=frozenset({"all_reduce", "reduce", "broadcast", "barrier"}),
        factory=lambda g, k, s, o: build_parameter_server(
            g.env, k, g.members, s, {}, o.root, servers=o.servers
        ),
        cost=cost,
        rank=5,
        in_auto=never,
    )
)
