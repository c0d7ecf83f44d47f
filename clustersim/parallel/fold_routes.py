"""Whether a folded job's twins meet the network as their representative does.

Folding simulates replica 0, TP rank 0 of each stage and gives every twin its
representative's times, so each twin's pipeline sends and data-parallel ring must cross
the same kind of links as the representative's. On the hierarchical topologies
(``single_node``, ``fat_tree``/``leaf_spine``, and ``wan`` of identical such sites) a
route's links follow from where its two GPUs sit relative to each other: on one server,
under one leaf switch, in one site, or in two sites. Folding is exact when, for every
twin, each peer it sends to sits at the same level as the representative's peer — it is
not when, say, a stage's replicas straddle a site border that the next stage's replicas
do not. Topologies whose routes depend on position (``ring``, ``torus_2d``, ``star``,
``custom``) and WAN sites that differ are not compared: folding is refused there.
"""

from __future__ import annotations

import json
from functools import lru_cache

from ..topology import build_topology
from .plan import Plan

#: topology kinds whose routes depend only on the levels two GPUs share
HIERARCHICAL = ("auto", "single_node", "fat_tree", "leaf_spine")
#: what a pair of GPUs shares, by level (0 = the same server … 3 = nothing: two sites)
LEVELS = ("one server", "one leaf switch", "one site", "two sites")


def _topology_obstacle(topology: dict) -> str | None:
    kind = topology.get("kind", "auto")
    if kind in HIERARCHICAL:
        return None
    if kind != "wan":
        return f"routes on a {kind} topology depend on where a GPU sits; folding is not checked there"
    sites = topology.get("sites") or []
    if topology.get("links") is not None:
        return "wan links are listed per site pair and may differ"
    if any(site != sites[0] for site in sites):
        return "wan sites differ"
    return _topology_obstacle((sites[0] or {}).get("topology") or {}) if sites else None


@lru_cache(maxsize=4)
def _placement(cluster_json: str) -> dict[str, tuple]:
    """:func:`_levels` of a cluster (its resolved section as JSON): built once per cluster,
    as a plan search asks for many plans on one cluster."""
    return _levels(build_topology(json.loads(cluster_json)))


def _levels(graph) -> dict[str, tuple]:
    """Per GPU node: (site, switches its server's NICs link to, server)."""
    leaves: dict[int, set] = {}
    for node, data in graph.nodes(data=True):
        if data.get("kind") == "nic":
            leaves.setdefault(data["host"], set()).update(
                v for v in graph.succ[node] if graph.nodes[v].get("kind") == "switch"
            )
    return {
        node: (data.get("site", 0), frozenset(leaves.get(data["host"], ())), data["host"])
        for node, data in graph.nodes(data=True)
        if data.get("kind") == "gpu"
    }


def _level(where: dict[str, tuple], a: int, b: int) -> int:
    (site_a, leaf_a, host_a), (site_b, leaf_b, host_b) = where[f"gpu{a}"], where[f"gpu{b}"]
    return 0 if host_a == host_b else 1 if leaf_a == leaf_b else 2 if site_a == site_b else 3


def route_obstacle(sc) -> str | None:
    """Why twins' routes differ from their representative's (None if they do not)."""

    why = _topology_obstacle(sc.cluster.topology)
    if why is not None:
        return why
    plan = Plan.of(sc)
    where = _placement(json.dumps(sc.cluster.model_dump(), sort_keys=True))
    hops = [(s, s + 1) for s in range(plan.pp - 1)]
    if sc.parallel.virtual_stages > 1 and plan.pp > 1:
        hops.append((plan.pp - 1, 0))  # an interleaved schedule's chunks wrap around
    for s, nxt in hops:
        level = _level(where, plan.device(s), plan.device(nxt))
        for r in range(plan.dp):
            for t in range(plan.tp):
                twin = _level(where, plan.device(s, r, t), plan.device(nxt, r, t))
                if twin != level:
                    return (
                        f"stage {s}'s replica {r}, TP rank {t} sends to stage {nxt} within {LEVELS[twin]}, "
                        f"replica 0 within {LEVELS[level]}"
                    )
    for s in range(plan.pp):
        ring = [_level(where, a, b) for a, b in _ring(plan.dp_group(s))]
        for t in range(1, plan.tp):
            if [_level(where, a, b) for a, b in _ring(plan.dp_group(s, t))] != ring:
                return f"stage {s}'s data-parallel group of TP rank {t} is laid out unlike TP rank 0's"
    return None


def _ring(group: tuple[int, ...]):
    return zip(group, group[1:] + group[:1])
