"""The topology registry and its entry point :func:`build_topology`.

``TOPOLOGIES`` maps the word a scenario uses (``cluster.topology.kind``) to a builder
``builder(cluster: dict, field: str) -> nx.DiGraph``. ``auto`` (the scenario default)
means ``single_node`` for one node and ``fat_tree`` otherwise. Every built graph is
checked the same way: GPU count matches ``nodes × gpus_per_node``, every GPU reaches
every other GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx

from ..errors import ScenarioError
from .clos import build_clos
from .custom import build_custom
from .direct import build_ring, build_torus_2d
from .graph import check_connected, gpu_names
from .single_node import build_single_node
from .star import build_star
from .wan import build_wan

TopologyBuilder = Callable[[dict, str], nx.DiGraph]

#: topology kind → builder
TOPOLOGIES: dict[str, TopologyBuilder] = {
    "single_node": build_single_node,
    "fat_tree": build_clos,
    "leaf_spine": build_clos,
    "ring": build_ring,
    "torus_2d": build_torus_2d,
    "star": build_star,
    "wan": build_wan,
    "custom": build_custom,
}


def _kind(cluster: dict, field: str) -> str:
    topo = cluster.get("topology")
    if topo is None:
        topo = {}
    if not isinstance(topo, dict):
        raise ScenarioError(f"{field}.topology", topo, "a mapping such as {kind: fat_tree}")
    kind = topo.get("kind", "auto")
    if kind == "auto":
        return "single_node" if cluster.get("nodes", 1) == 1 else "fat_tree"
    if not isinstance(kind, str) or kind not in TOPOLOGIES:
        raise ScenarioError(f"{field}.topology.kind", kind, f"known: auto, {', '.join(TOPOLOGIES)}")
    return kind


def build_site(cluster: dict, field: str = "cluster") -> nx.DiGraph:
    """Build the graph of ``cluster`` with the builder its ``topology.kind`` names (unchecked)."""
    kind = _kind(cluster, field)
    g = TOPOLOGIES[kind](cluster, field)
    g.graph["kind"] = kind
    return g


def build_topology(cluster: dict) -> nx.DiGraph:
    """Build and check the topology graph of a resolved ``cluster`` dict.

    Returns a DiGraph whose nodes carry ``kind`` (and ``host`` for GPUs) and whose edges
    carry ``bandwidth`` (bytes/s), ``latency`` (s) and ``kind``. Raises
    :class:`~clustersim.errors.ScenarioError` naming the offending field for an unknown
    kind, a bad quantity, a link to a missing node, or a GPU cut off from the others.
    """
    g = build_site(cluster, "cluster")
    remove_failed_links(g, cluster.get("failed_links") or [])
    gpus = gpu_names(g)
    g.graph["num_gpus"] = len(gpus)
    if g.graph["kind"] == "wan":
        expected = cluster.get("nodes", 1) * cluster.get("gpus_per_node", 8)
        if expected != len(gpus):
            raise ScenarioError(
                "cluster.nodes",
                cluster.get("nodes", 1),
                f"nodes × gpus_per_node must equal the {len(gpus)} GPUs the wan sites hold",
            )
    field = "cluster.topology.links" if g.graph["kind"] == "custom" else "cluster.topology"
    check_connected(g, "cluster.failed_links" if cluster.get("failed_links") else field)
    return g


def no_link_reason(g: nx.DiGraph) -> str:
    """Why a pair of nodes named as a link was refused, with a link of ``g`` to copy (a graph
    whose links have all failed has none to offer)."""
    example = next(iter(g.edges), None)
    if example is None:
        return "no link joins these topology nodes; the topology has no links left"
    return f"no link joins these topology nodes; give two linked nodes, e.g. {list(example)}"


def remove_failed_links(g: nx.DiGraph, links) -> None:
    """Remove both directions of every failed cable ``[a, b]`` (``cluster.failed_links``)."""
    for k, (a, b) in enumerate(links):
        if not (g.has_edge(a, b) or g.has_edge(b, a)):
            raise ScenarioError(f"cluster.failed_links[{k}]", [a, b], no_link_reason(g))
        for u, v in ((a, b), (b, a)):
            if g.has_edge(u, v):
                g.remove_edge(u, v)
