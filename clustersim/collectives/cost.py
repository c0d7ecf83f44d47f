"""α-β cost model of every algorithm: one closed form each, ``(shape, kind, S, servers)
-> seconds``, registered in :data:`clustersim.collectives.registry.ALGORITHMS`.

Like NCCL's tuner (``src/graph/tuning.cc``), ``auto`` does not try the algorithms: it
evaluates a closed form ``latency + bytes / bandwidth`` per algorithm for the group's
shape and the message size, and takes the smallest. The same closed forms are the
idle-network answers the tests check the simulated schedules against.

Symbols: n ranks on N hosts of m ranks each; S bytes (nccl-tests convention); B the
per-rank intra-host bandwidth; B_net the network bandwidth one rank gets while all m
ranks of its host use the network at once (NIC bandwidth × NICs per host / m); α the
per-step latency (intra-host, network), each including the fabric's path latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .ring import pipeline_chunks


@dataclass(frozen=True)
class Shape:
    """The parameters of the α-β model for one group (see module doc for symbols)."""

    n: int
    bw: float
    alpha: float
    nodes: int = 1
    bw_inter: float | None = None
    alpha_inter: float | None = None

    @property
    def m(self) -> int:
        return max(1, self.n // max(1, self.nodes))

    @property
    def net(self) -> tuple[float, float]:
        """(α, B) of a step that crosses the network (intra values on one host)."""
        if self.nodes <= 1:
            return self.alpha, self.bw
        return (
            self.alpha if self.alpha_inter is None else self.alpha_inter,
            self.bw if self.bw_inter is None else self.bw_inter,
        )


def ring(sh: Shape, kind: str, s: float, _servers: int) -> float:
    n, m = sh.n, sh.m
    a, b = sh.alpha, sh.bw
    if kind in ("broadcast", "reduce"):
        a_n, b_n = sh.net
        b_eff = b if sh.nodes <= 1 else min(b, b_n * m)
        return (n - 1) * max(a, a_n) + s / b_eff * (1 + (n - 2) / pipeline_chunks(int(s)))
    steps = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1}[kind]
    if sh.nodes <= 1:
        return steps * (a + s / (n * b))
    a_n, b_n = sh.net
    # data flow, no global step barrier: along the ring N of every n hops cross the
    # network (NCCL's tuner: intra steps × intraLat + inter steps × interLat); m channels,
    # each leaving every host once, so the NICs carry S/n per step per host
    # each rank paces by injection, so α's overlap and the time is the longer of the
    # dependency chain (2(n−1) hops, α + transfer each) and the busiest port's work
    a_step = ((n - sh.nodes) * a + sh.nodes * a_n) / n
    t_hop = s / (m * n) * ((n - sh.nodes) / (n * b) + sh.nodes / (n * b_n))
    return steps * max(a_step + t_hop, s / (n * m * b_n), (m - 1) * s / (m * n * b))


def halving_doubling(sh: Shape, kind: str, s: float, _servers: int) -> float:
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


def tree(sh: Shape, kind: str, s: float, _servers: int) -> float:
    depth = max(1, int(math.log2(sh.n)))
    a_n, b_n = sh.net
    a = max(sh.alpha, a_n)
    b = sh.bw if sh.nodes <= 1 else min(sh.bw, b_n)
    k = pipeline_chunks(int(s / 2))
    return 2 * (depth * a + (k + depth - 1) * s / (k * b))


def hierarchical(sh: Shape, kind: str, s: float, _servers: int) -> float:
    m, nodes = sh.m, sh.nodes
    a_n, b_n = sh.net
    return 2 * (m - 1) * (sh.alpha + s / (m * sh.bw)) + 2 * (nodes - 1) * (a_n + s / (m * nodes * b_n))


def direct(sh: Shape, kind: str, s: float, _servers: int) -> float:
    n, m = sh.n, sh.m
    a_n, b_n = sh.net
    if kind in ("broadcast", "reduce"):
        return max(sh.alpha, a_n) + (m - 1) * s / sh.bw + (n - m) * s / min(sh.bw, b_n * m)
    one = max(sh.alpha, a_n) + max((m - 1) * s / (n * sh.bw), (n - m) * s / (n * b_n))
    return 2 * one if kind == "all_reduce" else one


def parameter_server(sh: Shape, kind: str, s: float, servers: int) -> float:
    a = max(sh.net[0], sh.alpha)
    b = min(sh.bw, sh.net[1] * sh.m) if sh.nodes > 1 else sh.bw
    one = a + (sh.n - 1) * s / (servers * b)
    return 2 * one if kind == "all_reduce" else one
