"""Hierarchical all-reduce: intra-host reduce-scatter → inter-host all-reduce → intra-host
all-gather (as in Horovod's hierarchical mode and NCCL's CollNet/NVLS-tree structure).

Hosts come from the topology graph's ``host`` attribute of each GPU node. With N hosts of
m members each, the m ranks of a host first reduce-scatter the buffer over the fast
intra-host links (each keeps S/m), then the ranks with the same local index on every
host all-reduce their S/m shard over the network in parallel (one ring per local index,
so every NIC is used), then each host all-gathers. Idle time, ring phases:
``T = 2·(m−1)·(α_intra + S/(m·B_intra)) + 2·(N−1)·(α_inter + S/(m·N·B_inter))``
where B_inter is the network bandwidth a rank gets while all m ranks of its host send.
Only 2(N−1) steps cross the network instead of 2(n−1): it wins when the network is slow
or the messages are latency-bound.
"""

from __future__ import annotations

from .algorithm import ALGORITHMS, Algorithm
from .cost import Shape
from .ring import build_ring
from .schedule import all_of


def build_hierarchical(
    env, kind: str, hosts: dict[object, list[str]], nbytes: int, ready: dict, root=None, chunks=None
):
    """Three-phase all-reduce schedule over ``hosts`` (host → its members, equal counts)."""
    if kind != "all_reduce":
        raise ValueError(kind)
    groups = list(hosts.values())
    m = len(groups[0])
    if any(len(g) != m for g in groups):
        raise ValueError("every host needs the same number of members")
    engines = []
    have = {x: all_of(ready.get(x, ())) for g in groups for x in g}
    for g in groups:  # phase 1: reduce-scatter inside each host
        e, d = build_ring(env, "reduce_scatter", [g], nbytes, have)
        engines += e
        have.update(d)
    shard = -(-nbytes // m)
    for local in range(m):  # phase 2: one all-reduce per local index across hosts
        e, d = build_ring(env, "all_reduce", [[g[local] for g in groups]], shard, have)
        engines += e
        have.update(d)
    for g in groups:  # phase 3: all-gather inside each host
        e, d = build_ring(env, "all_gather", [g], nbytes, have)
        engines += e
        have.update(d)
    return engines, have


def fits(kind: str, n: int, per_host: tuple[int, ...]) -> str | None:
    """Every host must hold the same number of members (one intra-host ring each)."""
    if len(set(per_host)) > 1:
        return f"hierarchical needs the same number of members on every host; got {sorted(set(per_host))} per host"
    return None


def spans_hosts(n: int, per_host: tuple[int, ...]) -> bool:
    """On one host hierarchical is a plain ring with extra steps."""
    return len(per_host) > 1


def cost(sh: Shape, kind: str, s: float, _servers: int) -> float:
    """Idle-network α-β time (s) of ``kind`` on ``s`` bytes by hierarchical (symbols: :mod:`.cost`)."""
    m, nodes = sh.m, sh.nodes
    a_n, b_n = sh.net
    return 2 * (m - 1) * (sh.alpha + s / (m * sh.bw)) + 2 * (nodes - 1) * (a_n + s / (m * nodes * b_n))


ALGORITHMS.add(
    Algorithm(
        "hierarchical",
        "intra-host reduce-scatter, inter-host all-reduce, intra-host all-gather",
        kinds=frozenset({"all_reduce", "barrier"}),
        factory=lambda g, k, s, o: build_hierarchical(g.env, k, g.hosts, s, {}),
        cost=cost,
        rank=3,
        fits=fits,
        in_auto=spans_hosts,
    )
)
