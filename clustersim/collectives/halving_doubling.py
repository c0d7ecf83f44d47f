"""Recursive halving / doubling (Rabenseifner 2004; Thakur, Rabenseifner & Gropp 2005).

Reduce-scatter by recursive halving: in step t (t = 0..log2 p − 1) rank i exchanges half
of what it still holds, S/2^(t+1) bytes, with rank i XOR p/2^(t+1). All-gather by
recursive doubling mirrors it (distance 1, 2, …, sizes S/p·2^t). All-reduce is the two
back to back. On p = 2^m ranks with per-rank bandwidth B (full duplex):
``T_RS = T_AG = log2(p)·α + (p−1)/p · S/B`` and ``T_AR = 2·log2(p)·α + 2(p−1)/p · S/B``.

All-reduce on n ≠ 2^m ranks folds the r = n − p extra ranks in first (each sends its S
bytes to a partner among the first r ranks) and sends them the result at the end:
``+ 2·(α + S/B)``. Reduce-scatter and all-gather need a power-of-two group.
"""

from __future__ import annotations

from .algorithm import ALGORITHMS, Algorithm
from .cost import Shape
from .schedule import Msg, all_of


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, …"""
    return n > 0 and n & (n - 1) == 0


def build_halving_doubling(
    env, kind: str, order: list[str], nbytes: int, ready: dict, root=None, chunks=None
):
    """Schedule for all_reduce (any n), reduce_scatter / all_gather (n = 2^m)."""
    n = len(order)
    p = 1 << (n.bit_length() - 1)
    if kind != "all_reduce" and p != n:
        raise ValueError("power of two required")
    engines = {m: [] for m in order}
    have = {m: all_of(ready.get(m, ())) for m in order}
    for e in range(p, n):  # fold extras into their partners
        msg = Msg(env, order[e], order[e - p], nbytes, have[order[e]])
        engines[order[e]].append(msg)
        have[order[e - p]] = all_of(have[order[e - p]] + (msg.done,))
    core = order[:p]
    steps = p.bit_length() - 1
    plan = []
    if kind in ("all_reduce", "reduce_scatter"):
        plan += [(p >> (t + 1), -(-nbytes // (1 << (t + 1)))) for t in range(steps)]
    if kind in ("all_reduce", "all_gather"):
        plan += [(1 << t, -(-nbytes * (1 << t) // p)) for t in range(steps)]
    for dist, size in plan:
        sent = {}
        for i, m in enumerate(core):
            msg = Msg(env, m, core[i ^ dist], size, have[m])
            engines[m].append(msg)
            sent[core[i ^ dist]] = msg
        have = {m: (sent[m].done,) if m in sent else have[m] for m in order}
    for e in range(p, n):  # results back to the extras
        msg = Msg(env, order[e - p], order[e], nbytes, have[order[e - p]])
        engines[order[e - p]].append(msg)
        have[order[e]] = (msg.done,)
    return list(engines.values()), have


def fits(kind: str, n: int, per_host: tuple[int, ...]) -> str | None:
    """Only an all-reduce folds a non-power-of-two group into a power of two."""
    if kind != "all_reduce" and not is_power_of_two(n):
        return f"{kind} by halving_doubling needs a power-of-two group; got {n} members"
    return None


def cost(sh: Shape, kind: str, s: float, _servers: int) -> float:
    """Idle-network α-β time (s) of ``kind`` on ``s`` bytes by halving_doubling (symbols: :mod:`.cost`)."""
    n = sh.n
    p = 1 << (n.bit_length() - 1)
    a_n, b_n = sh.net

    def step(dist: int, size: float) -> float:
        cross = sh.nodes > 1 and dist >= sh.m
        return (a_n + size / b_n) if cross else (sh.alpha + size / sh.bw)

    k = p.bit_length() - 1
    t = 0.0
    if kind in ("all_reduce", "reduce_scatter"):
        t += sum(step(p >> (i + 1), s / 2 ** (i + 1)) for i in range(k))
    if kind in ("all_reduce", "all_gather"):
        t += sum(step(1 << i, s * 2**i / p) for i in range(k))
    if p != n:
        t += 2 * step(p, s)
    return t


ALGORITHMS.add(
    Algorithm(
        "halving_doubling",
        "recursive halving (reduce-scatter) and doubling (all-gather)",
        kinds=frozenset({"all_reduce", "reduce_scatter", "all_gather", "barrier"}),
        factory=lambda g, k, s, o: build_halving_doubling(g.env, k, g.members, s, {}),
        cost=cost,
        rank=2,
        fits=fits,
        across_hosts=frozenset(),
    )
)
