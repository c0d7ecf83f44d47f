"""NCCL's tree all-reduce as NCCL builds it (``NCCL_ALGO=Tree``; NCCL ``src/graph/trees.cc``,
``src/graph/connect.cc``): a chain inside each host, a double binary tree across hosts.

Each channel c picks one head per host (the host's c-th member; its NIC is the channel's way
out) and chains the host's members below it in a rotated order. Across hosts the heads form
two binary trees over the hosts (NCCL's double binary tree, :func:`dtree_parents`: the
second is the first mirrored, or shifted by one host for an odd count), so a host that is
inner in one tree is mostly a leaf in the other. Each of the channel's two trees carries half of the channel's share of the
buffer, reduced up (chain, then tree) and broadcast back down, pipelined in chunks
(:func:`~.tree.pipelined_trees`). With as many channels as members per host every NIC
and every NVLink port is used.

Traffic per rank, S bytes on n ranks over N hosts of m: inside a host a rank forwards
(m − 1)/m · S up and as much down, on its scale-up port; a host's NICs carry S out and S in
per phase on N > 2 hosts (an inner host receives two children's halves, sends one up; as a
leaf of the other tree it sends its half), and half that on two hosts, where each host is
the other's only child — why NCCL's tree beats the ring on two nodes (sjeaugey, NVIDIA/nccl
#946: "up to ~2x the network speed"). The idle-fabric time is the pipelined-tree form on the
slower of the two ports, with NCCL's tree bandwidth factor 0.92 (tuning.cc: ``busBw * .92``
for Tree all-reduce) as the wire efficiency of its messages:

``T = 2·d·α + (k + d − 1)/k · max(2(m − 1)/m · S/B, f·S/(m·B_net)) / 0.92``

with d = (m − 1) + ⌈log2 N⌉ hops, k chunks per tree, f = 1 on two hosts and 2 beyond.
"""

from __future__ import annotations

import math

from .algorithm import ALGORITHMS, Algorithm, never
from .cost import Shape
from .ring import pipeline_chunks
from .schedule import split
from .tree import pipelined_trees

#: NCCL's bandwidth factor of the Tree all-reduce over its graph's bandwidth (tuning.cc
#: ``if (a == NCCL_ALGO_TREE && coll == ncclFuncAllReduce) busBw = std::min(busBw * .92, …)``),
#: taken as the payload fraction of its messages
TREE_EFFICIENCY = 0.92


def btree_parent(nranks: int, rank: int) -> int:
    """NCCL's binary tree (trees.cc ``ncclGetBtree``): the parent of ``rank`` among
    ``nranks`` (-1 for rank 0, the root, whose one child is the highest power of two below
    ``nranks``)."""
    if rank == 0:
        return -1
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < nranks else rank ^ bit


def dtree_parents(nranks: int) -> tuple[list[int], list[int]]:
    """NCCL's double binary tree (trees.cc ``ncclGetDtree``): the parent of each rank in the
    first tree and in the second — the first shifted by one rank for an odd count, mirrored
    (rank r ↔ n − 1 − r) for an even one."""
    first = [btree_parent(nranks, r) for r in range(nranks)]
    if nranks % 2:
        second = [
            -1 if first[(r - 1) % nranks] < 0 else (first[(r - 1) % nranks] + 1) % nranks
            for r in range(nranks)
        ]
    else:
        second = [
            -1 if first[nranks - 1 - r] < 0 else nranks - 1 - first[nranks - 1 - r] for r in range(nranks)
        ]
    return first, second


def channel_trees(hosts: dict[object, list[str]], channel: int) -> list[dict[str, dict]]:
    """The two trees of ``channel`` over every member of ``hosts`` (host → its members):
    ``{"parent": {rank: parent|None}, "children": {rank: [...]}}`` each — a chain inside
    each host from its head (the ``channel``-th member) down, the heads joined across hosts
    by NCCL's double binary tree over the hosts (:func:`dtree_parents`)."""
    chains = [grp[channel % len(grp) :] + grp[: channel % len(grp)] for grp in hosts.values()]
    nodes = len(chains)
    trees = []
    for par in dtree_parents(nodes) if nodes > 1 else ([-1],):
        parent: dict[str, str | None] = {}
        for q, chain in enumerate(chains):
            parent[chain[0]] = chains[par[q]][0] if par[q] >= 0 else None
            for above, below in zip(chain, chain[1:], strict=False):
                parent[below] = above
        children: dict[str, list[str]] = {r: [] for r in parent}
        for r, p in parent.items():
            if p is not None:
                children[p].append(r)
        trees.append({"parent": parent, "children": children})
    return trees


def build(group, kind: str, nbytes: int, options):
    """The NCCL tree all-reduce of ``group`` (module doc): one channel per member of the
    fullest host (``options.channels`` overrides), two trees per channel."""
    if kind != "all_reduce":
        raise ValueError(kind)
    hosts = group.hosts
    channels = options.channels or max(len(grp) for grp in hosts.values())
    trees = []
    for c, part in enumerate(split(nbytes, channels)):
        pair = channel_trees(hosts, c)
        trees += [(tree, math.ceil(b / TREE_EFFICIENCY)) for tree, b in zip(pair, split(part, len(pair)))]
    # a rank sends up every tree of every channel at once: its up-engines inside its host
    # share its scale-up port, those to another host its NIC
    senders: dict[tuple[str, bool], int] = {}
    for tree, _ in trees:
        for r, p in tree["parent"].items():
            if p is not None:
                key = (r, group.host[r] == group.host[p])
                senders[key] = senders.get(key, 0) + 1

    def share_of(src: str, dst: str) -> float:
        return 1.0 / senders[(src, group.host[src] == group.host[dst])]

    return pipelined_trees(group.env, group.members, trees, {}, options.chunks, share_of, through=True)


def cost(sh: Shape, kind: str, s: float, _servers: int) -> float:
    """Idle-network α-β time (s) of an all-reduce of ``s`` bytes by NCCL's tree (module doc)."""
    m, nodes = sh.m, sh.nodes
    a_n, b_n = sh.net
    up = math.ceil(math.log2(nodes)) if nodes > 1 else 0
    depth = max(1, (m - 1) + up)
    alpha = ((m - 1) * sh.alpha + up * a_n) / depth  # the hops' mean α
    per_tree = s / (2 * m if nodes > 1 else m)
    k = pipeline_chunks(int(per_tree))
    port = 2 * (m - 1) / m * s / sh.bw if m > 1 else 0.0
    nic = 0.0 if nodes <= 1 else (1 if nodes == 2 else 2) * s / (m * b_n)
    return 2 * depth * alpha + (k + depth - 1) / k * max(port, nic) / TREE_EFFICIENCY


ALGORITHMS.add(
    Algorithm(
        "nccl_tree",
        "NCCL's tree: chains inside hosts, double binary tree across them",
        kinds=frozenset({"all_reduce", "barrier"}),
        factory=build,
        cost=cost,
        rank=6,
        in_auto=never,
    )
)
