"""The topology graph of a cluster section, built once and shared read-only.

The graph carries the cluster's link degradation windows (edge attribute ``windows``), so
the fabric, the fold check and the compression domains all read the same graph. Builds
of the last two cluster sections (as JSON) are kept: a plan search resolves many jobs on
one cluster, and a written 16,384-GPU topology takes a tenth of a second to build (two, not
more: such a graph holds tens of MB; a fat tree's or a rail's is written only when read,
:mod:`clustersim.topology.lazy`). Nothing may modify a returned graph.
"""

from __future__ import annotations

import json
from functools import lru_cache

import networkx as nx

from ..network.degradation import apply_degradations
from ..topology import build_topology


def topology_graph(cluster) -> nx.DiGraph:
    """The checked topology of a ``cluster`` section (GPU ``i`` is node ``gpu{i}``), with its
    ``link_degradations`` windows applied (to a copy: the cached build stays bare)."""
    graph = _build(json.dumps(cluster.model_dump(), sort_keys=True))
    if cluster.link_degradations:
        graph = graph.copy()
        apply_degradations(graph, cluster.link_degradations)
    return graph


@lru_cache(maxsize=2)
def _build(cluster_json: str) -> nx.DiGraph:
    return build_topology(json.loads(cluster_json))
