"""``rail``: a rail-optimized network — NIC k of every server on rail switch ``rail{k}``,
optionally with a spine layer joining the rails.

Fields:

* ``spines`` — spine switches (default 0: a rail-only network); each rail switch links to
  every spine, each link carrying ``nodes × NIC bandwidth / (oversubscription × spines)``;
* ``oversubscription`` — rail-to-spine taper (default 1: full bisection);
* ``latency`` — of a rail↔spine link (default: half the NIC latency, like a NIC↔rail link).

Wiring assumptions: servers are built as everywhere (:mod:`.servers`): GPU ``j`` uses NIC
``j · nic.per_node // gpus_per_node``, so with one NIC per GPU GPU ``j`` of every server sits
on rail ``j``. Timing assumptions: every link is store-and-forward at its rate; switches
add no delay beyond their links' latency. Routes are shortest by hops (ECMP among equals):

* same server: through its NVSwitch, as on any topology;
* same rail, different servers: GPU → NIC → one rail switch → NIC → GPU (one switch hop);
* different rails, different servers: six hops whichever way — forwarded over NVLink to
  the GPU on the destination's rail first (on the source server), or after the rail
  (on the destination server), as NCCL's PXN does; with spines, also rail → spine →
  rail. ECMP picks among them per flow.

Placement (folding): the levels are (site 0, the rail switch a GPU's NIC links to, its
server), so a twin's send crosses the same kind of links as its representative's exactly
when the two pairs are both same-server, both same-rail or both cross-rail. With spines,
cross-rail routes differ in shape (spine or NVLink forwarding, an ECMP choice per pair), so
folding is refused where a folded transfer (a pipeline send, a data-parallel ring neighbour,
an expert group's pair) crosses rails between servers; same-server and same-rail routes
never touch a spine (they are shorter), so a job whose transfers stay on their rails folds:
its twins differ from their representative by a shift of GPU index within the server, which
maps rail to rail.

The graph is written on first use (:mod:`.lazy`); :class:`RailLayout` answers for its nodes
and links until then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import networkx as nx

from .graph import Latency, add_link, count_field, oversubscription_ratio
from .hierarchy import Hierarchy
from .lazy import LazyDiGraph, has_node
from .plugin import TOPOLOGIES, Placements, Site, Topology, TopologyOptions, levels
from .servers import add_server
from .tiers import TwoTierLayout


class RailOptions(TopologyOptions):
    """``cluster.topology`` of ``rail`` (module docstring)."""

    kind: Literal["rail"]
    spines: int = 0
    oversubscription: float = 1.0
    latency: Latency | None = None


def build_rail(site: Site) -> nx.DiGraph:
    """Build a rail-optimized cluster; see the module docstring for fields."""
    opts, spec, tf = site.options, site.servers, site.topology_field
    spines = count_field(opts.spines, f"{tf}.spines", minimum=0)
    oversub = oversubscription_ratio(opts.oversubscription, f"{tf}.oversubscription")
    uplink_lat = spec.nic_latency / 2 if opts.latency is None else opts.latency
    uplink_bw = spec.nodes * spec.nic_bandwidth / (oversub * spines) if spines else 0.0
    return LazyDiGraph.of(
        RailLayout(spec, spines, uplink_bw, uplink_lat),
        border=[f"spine{s}" for s in range(spines)] or [f"rail{k}" for k in range(spec.nics_per_node)],
        hierarchy=Hierarchy.of(spec, "rail", spines),
    )


@dataclass(frozen=True)
class RailLayout(TwoTierLayout):
    """What :func:`build_rail` decided (:class:`.tiers.TwoTierLayout`, the rails its lower
    tier): the graph it writes and the answers for it."""

    lower = "rail"

    @property
    def lower_switches(self) -> int:
        return self.spec.nics_per_node

    def lower_of(self, host: int, k: int) -> int:
        return k

    def write(self, g: nx.DiGraph) -> None:
        """Rails, then each spine with its links to every rail, then each server with its NICs' links."""
        spec = self.spec
        rails = [f"rail{k}" for k in range(spec.nics_per_node)]
        for rail in rails:
            g.add_node(rail, kind="switch")
        for s in range(self.spines):
            g.add_node(f"spine{s}", kind="switch")
            for rail in rails:
                add_link(g, rail, f"spine{s}", self.uplink_bandwidth, self.uplink_latency, "fabric")
        for n in range(spec.nodes):
            for k, nic in enumerate(add_server(g, spec, n)):
                add_link(g, nic, rails[self.lower_of(n, k)], spec.nic_bandwidth, spec.nic_latency / 2, "nic")


#: level 2 of :data:`clustersim.parallel.fold_routes.LEVELS`: two servers, two rails (leaves)
CROSS_RAIL = 2


def rail_placement(g: nx.DiGraph):
    """Levels; with spines, the cross-rail level marked as position-dependent (module
    docstring)."""
    if has_node(g, "spine0"):  # spines are spine0, spine1, …
        why = "cross-rail routes on a rail topology with spines take the spine or NVLink forwarding by ECMP"
        return Placements(levels(g), {CROSS_RAIL: why})
    return levels(g)


TOPOLOGIES.add(
    Topology(
        "rail",
        "rail-optimized: NIC k of every server on rail switch k, optional spines",
        factory=build_rail,
        options=RailOptions,
        placement=rail_placement,
    )
)
