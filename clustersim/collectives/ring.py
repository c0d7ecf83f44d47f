"""Ring algorithms (NCCL's ``RING``): reduce-scatter, all-gather, all-reduce, and the
pipelined chain used for broadcast and reduce.

All-reduce of S bytes over n ranks runs 2(n−1) steps; in each, every rank sends one
S/n chunk to its successor — reduce-scatter for the first n−1 steps, all-gather for the
rest. A rank's step k waits for its predecessor's step k−1 to arrive (data flow, no
global barrier), so on an idle ring of bandwidth B and step latency α:
``T = 2(n−1)·α + 2(n−1)/n · S/B``.

Across several hosts the ring is split into *channels* (as NCCL does): one ring per
local rank, each visiting every host with its intra-host order rotated, so each channel
leaves a host through a different GPU (and NIC); on rail and multi-plane fabrics each
channel stays on one rail instead (:mod:`.rail_rings`, as NCCL's rings do). Each channel
carries 1/C of the data.
Broadcast and reduce run as a chain along the ring, pipelined in chunks.
"""

from __future__ import annotations

from . import merged_ring
from .algorithm import ALGORITHMS, KINDS, Algorithm
from .cost import Shape
from .rail_rings import aligned_orders, rail_matched
from .ring_hops import chain_time, ring_time
from .schedule import Msg, all_of, split

#: chunking of pipelined chains and trees: at most this many chunks, none below MIN
MAX_PIPELINE_CHUNKS = 64
MIN_PIPELINE_CHUNK = 32 * 1024
#: ring steps per collective over n ranks
_STEPS = {
    "all_reduce": lambda n: 2 * (n - 1),
    "reduce_scatter": lambda n: n - 1,
    "all_gather": lambda n: n - 1,
}


def pipeline_chunks(nbytes: int, chunks: int | None = None) -> int:
    """Number of pipeline chunks for a ``nbytes`` message (an explicit ``chunks`` wins)."""
    if chunks:
        return max(1, int(chunks))
    return max(1, min(MAX_PIPELINE_CHUNKS, -(-int(nbytes) // MIN_PIPELINE_CHUNK)))


def ring_orders(hosts: dict[object, list[str]], channels: int | None = None, graph=None) -> list[list[str]]:
    """Ring orders, one per channel: hosts in turn, each host's members rotated by channel —
    rail-aligned instead on a rail or multi-plane ``graph`` (:mod:`.rail_rings`)."""
    locals_ = list(hosts.values())
    if channels is None:
        channels = 1 if len(locals_) == 1 else max(len(m) for m in locals_)
    if rail_matched(graph, hosts):
        return aligned_orders(hosts, max(1, channels))
    orders = []
    for c in range(max(1, channels)):
        orders.append([m for grp in locals_ for m in grp[c % len(grp) :] + grp[: c % len(grp)]])
    return orders


def _chain(env, order, nsteps, size_of, ready):
    """Ring steps 0..nsteps-1: rank i sends ``size_of(step, i)`` bytes to i+1.

    Returns (engines, last arrival event per rank)."""
    n = len(order)
    ready = {m: all_of(ready.get(m, ())) for m in order}
    engines = [[] for _ in range(n)]
    prev = [None] * n  # message that arrived at rank i in the previous step
    for s in range(nsteps):
        cur = [None] * n
        for i, src in enumerate(order):
            deps = ready[src] if s == 0 else (prev[i].done,)
            msg = Msg(env, src, order[(i + 1) % n], size_of(s, i), deps)
            engines[i].append(msg)
            cur[(i + 1) % n] = msg
        prev = cur
    done = {m: ((prev[i].done,) if prev[i] else ready[m]) for i, m in enumerate(order)}
    return engines, done


def build_ring(env, kind: str, orders: list[list[str]], nbytes: int, ready: dict, root=None, chunks=None):
    """Ring schedule for ``kind`` over one or more channel ``orders``; see module doc."""
    engines, done = [], {}
    for order, part in zip(orders, split(nbytes, len(orders)), strict=True):
        n = len(order)
        if n == 1:
            continue
        sizes = split(part, n)
        if kind == "all_reduce":
            e, d = _chain(env, order, 2 * (n - 1), lambda s, i, z=sizes, n=n: z[(i - s) % n], ready)
        elif kind in ("reduce_scatter", "all_gather"):
            e, d = _chain(env, order, n - 1, lambda s, i, z=sizes, n=n: z[(i - s) % n], ready)
        elif kind in ("broadcast", "reduce"):
            e, d = pipelined_chain(env, kind, order, part, ready, root, chunks)
        else:
            raise ValueError(kind)
        engines.extend(e)
        for m, evs in d.items():
            done[m] = done.get(m, ()) + tuple(evs)
    return engines, {m: all_of(evs) for m, evs in done.items()}


def pipelined_chain(env, kind, order, nbytes, ready, root, chunks=None):
    """Broadcast (from ``root`` down the chain) or reduce (up the chain into ``root``).

    The chain is cut into k chunks; rank p forwards chunk j once it has it. Idle time:
    ``(n−1)·α + S/B + (n−2)·S/(k·B)``."""
    root = root if root is not None else order[0]
    r = order.index(root)
    # broadcast: root first; reduce: root last
    chain = order[r:] + order[:r] if kind == "broadcast" else order[r + 1 :] + order[: r + 1]
    n, sizes = len(chain), split(nbytes, pipeline_chunks(nbytes, chunks))
    ready = {m: all_of(ready.get(m, ())) for m in chain}
    engines = [[] for _ in range(n)]
    last = [None] * n
    arrived = [[None] * len(sizes) for _ in range(n)]
    for j, size in enumerate(sizes):
        for p in range(n - 1):
            deps = ready[chain[p]] if p == 0 else (arrived[p][j].done,)
            if kind == "reduce" and p > 0:
                deps += ready[chain[p]]
            msg = Msg(env, chain[p], chain[p + 1], size, deps)
            engines[p].append(msg)
            arrived[p + 1][j] = last[p + 1] = msg
    done = {m: ((last[p].done,) if last[p] else ready[m]) for p, m in enumerate(chain)}
    return engines, done


def cost(sh: Shape, kind: str, s: float, _servers: int) -> float:
    """Idle-network α-β time (s) of ``kind`` on ``s`` bytes by ring (symbols: :mod:`.cost`)."""
    n, m = sh.n, sh.m
    a, b = sh.alpha, sh.bw
    if sh.hops:  # one host, hops unlike
        if kind in ("broadcast", "reduce"):
            return chain_time(sh, kind, s, pipeline_chunks(int(s)))
        return ring_time(sh, _STEPS[kind](n), s)
    if kind in ("broadcast", "reduce"):
        a_n, b_n = sh.net
        b_eff = b if sh.nodes <= 1 else min(b, b_n * m)
        return (n - 1) * max(a, a_n) + s / b_eff * (1 + (n - 2) / pipeline_chunks(int(s)))
    steps = _STEPS[kind](n)
    if sh.nodes <= 1:
        return steps * (a + s / (n * b))
    a_n, b_n = sh.net
    # data flow, no global step barrier: along the ring N of every n hops cross the
    # network (NCCL's tuner: intra steps × intraLat + inter steps × interLat); m channels,
    # each leaving every host once, so the NICs carry S/n per step per host
    # each rank paces by injection, so α's overlap and the time is the longer of the
    # dependency chain (2(n−1) hops, α + transfer each) and the busiest port's work
    a_step = fill_alpha(sh)
    t_hop = s / (m * n) * ((n - sh.nodes) / (n * b) + sh.nodes / (n * b_n))
    if sh.latency == "nccl":  # NCCL's tuner: the hops' α's are the pipeline's fill, paid in full
        return steps * (a_step + max(t_hop, s / (n * m * b_n), (m - 1) * s / (m * n * b)))
    return steps * max(a_step + t_hop, s / (n * m * b_n), (m - 1) * s / (m * n * b))


def fill_alpha(sh: Shape) -> float:
    """The mean α of a ring step across hosts: N of every n hops cross the network."""
    a_n, _ = sh.net
    return ((sh.n - sh.nodes) * sh.alpha + sh.nodes * a_n) / sh.n


def build(group, kind: str, nbytes: int, options):
    """The ring of ``group`` (see :func:`build_ring`). With ``latency: nccl`` across hosts a
    reduce-scatter, all-gather or all-reduce pays its steps' mean α once, as the pipeline's
    fill before the first step, and its messages none (:func:`cost`'s ``nccl`` form)."""
    env, orders = group.env, ring_orders(group.hosts, options.channels, group.graph)
    ready = {}
    fill = group.latency == "nccl" and len(group.hosts) > 1 and kind in _STEPS
    if fill:
        shape = group.shape()
        gate = env.timeout(_STEPS[kind](shape.n) * fill_alpha(shape))
        ready = dict.fromkeys(group.members, (gate,))
    engines, done = build_ring(env, kind, orders, nbytes, ready, options.root, options.chunks)
    if fill:
        for prog in engines:
            for msg in prog:
                msg.alpha = 0.0
    return engines, done


def merge_plan(group, kind: str, nbytes: int, options):
    """The closed form of this ring call while it has its links to itself
    (:mod:`.merged_ring`), or None where it has none: the fills and orders :func:`build` uses."""
    if kind not in _STEPS:
        return None
    fill = group.latency == "nccl" and len(group.hosts) > 1
    head = _STEPS[kind](group.shape().n) * fill_alpha(group.shape()) if fill else None
    orders = ring_orders(group.hosts, options.channels, group.graph)
    return merged_ring.plan(group, kind, nbytes, _STEPS[kind], orders, head)


ALGORITHMS.add(
    Algorithm(
        "ring",
        "NCCL ring, multi-channel across hosts",
        kinds=frozenset(KINDS) - {"all_to_all"},
        factory=build,
        cost=cost,
        rank=0,
    )
)
