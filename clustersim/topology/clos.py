"""``fat_tree`` and ``leaf_spine``: a two-tier folded Clos of leaf and spine switches.

Both names build the same network (papers use both words): every server's NICs connect
to one leaf switch, ``nodes_per_leaf`` servers per leaf, and every leaf connects to every
spine. Intra-node traffic stays on the node's NVSwitch; inter-node traffic leaves through
the GPU's NIC.

Fields (all optional):

* ``nodes_per_leaf`` — servers under one leaf (default: as many as fill 32 leaf ports,
  i.e. ``max(1, 32 // nic.per_node)``, at most ``nodes``);
* ``spines`` — number of spine switches (default ``nic.per_node``);
* ``oversubscription`` — leaf downlink capacity / uplink capacity (default 1: full
  bisection; 2 means uplinks carry half of what the NICs below can inject). Each
  leaf↔spine link gets ``nodes_per_leaf · nic.per_node · nic.bandwidth / (oversubscription · spines)``;
* ``latency`` — latency of one leaf↔spine link (default: half of ``nic.latency``, the same
  as one NIC↔leaf link).

Switches are named ``leaf{j}`` and ``spine{s}``. The graph is written on first use
(:mod:`.lazy`); :class:`ClosLayout` answers for its nodes and links until then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import networkx as nx

from .graph import Latency, add_link, count_field, oversubscription_ratio
from .hierarchy import Hierarchy
from .lazy import LazyDiGraph
from .plugin import TOPOLOGIES, Site, Topology, TopologyOptions, levels
from .servers import add_server
from .tiers import TwoTierLayout


class LeafSpineFields(TopologyOptions):
    """The fields of a leaf–spine tier: its leaves' size, spines, uplink oversubscription and
    uplink latency (``fat_tree`` / ``leaf_spine`` here, each plane of ``multi_plane``);
    ``kind`` first, as each kind's own options name it."""

    kind: str
    nodes_per_leaf: int | None = None
    spines: int | None = None
    oversubscription: float = 1.0
    latency: Latency | None = None


class FatTreeOptions(LeafSpineFields):
    """``cluster.topology`` of ``fat_tree`` / ``leaf_spine`` (module docstring)."""

    kind: Literal["fat_tree", "leaf_spine"]


def build_clos(site: Site) -> nx.DiGraph:
    """Build a leaf–spine (two-tier fat-tree) cluster; see the module docstring for fields."""
    opts, spec, tf = site.options, site.servers, site.topology_field
    per_leaf = opts.nodes_per_leaf
    if per_leaf is None:
        per_leaf = min(spec.nodes, max(1, 32 // spec.nics_per_node))
    per_leaf = count_field(per_leaf, f"{tf}.nodes_per_leaf")
    spines = count_field(spec.nics_per_node if opts.spines is None else opts.spines, f"{tf}.spines")
    oversub = oversubscription_ratio(opts.oversubscription, f"{tf}.oversubscription")
    uplink_lat = spec.nic_latency / 2 if opts.latency is None else opts.latency
    uplink_bw = per_leaf * spec.nics_per_node * spec.nic_bandwidth / (oversub * spines)
    return LazyDiGraph.of(
        ClosLayout(spec, spines, uplink_bw, uplink_lat, nodes_per_leaf=per_leaf),
        border=[f"spine{s}" for s in range(spines)],
        hierarchy=Hierarchy.of(spec, "clos", spines, nodes_per_leaf=per_leaf),
    )


@dataclass(frozen=True)
class ClosLayout(TwoTierLayout):
    """What :func:`build_clos` decided (:class:`.tiers.TwoTierLayout`, the leaves its lower
    tier): the graph it writes and the answers for it."""

    nodes_per_leaf: int
    lower = "leaf"

    @property
    def lower_switches(self) -> int:
        return math.ceil(self.spec.nodes / self.nodes_per_leaf)

    def lower_of(self, host: int, k: int) -> int:
        return host // self.nodes_per_leaf

    def write(self, g: nx.DiGraph) -> None:
        """Spines, then each leaf with its uplinks, then each server with its NICs' links."""
        spec = self.spec
        for s in range(self.spines):
            g.add_node(f"spine{s}", kind="switch")
        for j in range(self.lower_switches):
            leaf = f"leaf{j}"
            g.add_node(leaf, kind="switch")
            for s in range(self.spines):
                add_link(g, leaf, f"spine{s}", self.uplink_bandwidth, self.uplink_latency, "fabric")
        for n in range(spec.nodes):
            for k, nic in enumerate(add_server(g, spec, n)):
                add_link(
                    g, nic, f"leaf{self.lower_of(n, k)}", spec.nic_bandwidth, spec.nic_latency / 2, "nic"
                )


TOPOLOGIES.add(
    Topology(
        "fat_tree",
        "two-tier Clos: servers on leaf switches, every leaf on every spine (ECMP)",
        factory=build_clos,
        options=FatTreeOptions,
        placement=levels,
    )
)


TOPOLOGIES.add(
    Topology(
        "leaf_spine",
        "the same two-tier Clos as fat_tree",
        factory=build_clos,
        options=FatTreeOptions,
        placement=levels,
    )
)
