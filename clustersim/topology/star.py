"""``star``: workers around one central ``server`` node.

The shape of a parameter server, or of edge devices around a cloud. The centre is a node
named ``server`` of kind ``server`` — not a GPU, so ``gpu0..gpu{N-1}`` are all workers and
a parameter-server collective sends to and receives from ``"server"``. Each server's
NICs (built as for any multi-node cluster, with the NVSwitch inside the node) link
straight to the centre.

Fields (all optional): ``bandwidth`` — each NIC↔server link, both directions (default
``nic.bandwidth``); ``uplink`` / ``downlink`` — worker→server and server→worker
bandwidths when they differ (edge uplinks are often slower); ``latency`` — one way
(default ``nic.latency``); ``server_bandwidth`` — the centre's own NIC, each direction:
the NIC links then meet at a ``hub`` switch joined to ``server`` by one link of this
bandwidth that all their traffic shares (unset: no such limit, the links end at the
server itself).
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from .graph import Bandwidth, Latency
from .hierarchy import Hierarchy
from .plugin import TOPOLOGIES, Site, Topology, TopologyOptions
from .servers import add_server


class StarOptions(TopologyOptions):
    """``cluster.topology`` of ``star`` (module docstring)."""

    kind: Literal["star"]
    bandwidth: Bandwidth | None = None
    uplink: Bandwidth | None = None
    downlink: Bandwidth | None = None
    latency: Latency | None = None
    server_bandwidth: Bandwidth | None = None


SERVER = "server"
#: the switch in front of the server when ``server_bandwidth`` limits its NIC
HUB = "hub"


def build_star(site: Site) -> nx.DiGraph:
    """Build a star: every node's NICs joined to the central ``server`` node."""
    opts, spec = site.options, site.servers
    bw = spec.nic_bandwidth if opts.bandwidth is None else opts.bandwidth
    up = bw if opts.uplink is None else opts.uplink
    down = bw if opts.downlink is None else opts.downlink
    lat = spec.nic_latency if opts.latency is None else opts.latency
    g = nx.DiGraph()
    g.add_node(SERVER, kind="server")
    centre = SERVER
    if opts.server_bandwidth is not None:
        own = opts.server_bandwidth
        centre = HUB
        g.add_node(HUB, kind="switch")
        g.add_edge(HUB, SERVER, bandwidth=own, latency=0.0, kind="nic")
        g.add_edge(SERVER, HUB, bandwidth=own, latency=0.0, kind="nic")
    for n in range(spec.nodes):
        for nic in add_server(g, spec, n):
            g.add_edge(nic, centre, bandwidth=up, latency=lat, kind="nic")
            g.add_edge(centre, nic, bandwidth=down, latency=lat, kind="nic")
    g.graph["border"] = [SERVER]
    g.graph["hierarchy"] = Hierarchy.of(spec, "star", centre=centre)
    return g


TOPOLOGIES.add(
    Topology(
        "star",
        "every server on one central switch (uplink/downlink rates per server)",
        factory=build_star,
        options=StarOptions,
    )
)
