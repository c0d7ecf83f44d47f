"""``single_node``: all GPUs of one server on its NVSwitch (or PCIe switch).

Each GPU↔switch link runs at the intra-node bandwidth. The server's NICs are built too
(joined to their GPUs) so the node can be a site of a ``wan`` topology; inside one node no
route uses them. More than one node with this kind is an error.
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from ..errors import ScenarioError
from .hierarchy import Hierarchy
from .plugin import TOPOLOGIES, Site, Topology, TopologyOptions, levels
from .servers import add_server


class SingleNodeOptions(TopologyOptions):
    """``cluster.topology`` of ``single_node`` (module docstring)."""

    kind: Literal["single_node"]


def build_single_node(site: Site) -> nx.DiGraph:
    """Build one server: ``gpu0..gpu{G-1}`` around ``nvswitch0`` (or ``pcie0``)."""
    spec = site.servers
    if spec.nodes != 1:
        raise ScenarioError(
            f"{site.topology_field}.kind",
            "single_node",
            f"a cluster of {spec.nodes} nodes needs a multi-node topology (e.g. fat_tree)",
        )
    g = nx.DiGraph()
    g.graph["border"] = add_server(g, spec, 0)
    g.graph["hierarchy"] = Hierarchy.of(spec, "none")
    return g


TOPOLOGIES.add(
    Topology(
        "single_node",
        "one server: every GPU on its NVSwitch (or PCIe switch)",
        factory=build_single_node,
        options=SingleNodeOptions,
        placement=levels,
    )
)
