"""``multi_plane``: several independent scale-out planes per server — NIC k of every server
on plane k mod P, each plane its own two-tier leaf–spine, the planes never joined (DeepSeek's
eight-plane fat tree: "Insights into DeepSeek-V3", ISCA 2025, §5; multi-plane Ethernet
fabrics).

Fields:

* ``planes`` — P, dividing the NICs per server (default: one plane per NIC);
* ``nodes_per_leaf`` — servers on each leaf switch of a plane (default: all on one leaf);
* ``spines`` — spine switches per plane (default 1 where a plane has several leaves, else
  0); each leaf links to every spine of its plane, each link carrying ``nodes_per_leaf ×
  NICs per plane × NIC bandwidth / (oversubscription × spines)``;
* ``oversubscription`` — leaf-to-spine taper (default 1); ``latency`` — of a leaf↔spine link
  (default: half the NIC latency).

Routes are shortest by hops (ECMP among equals). A message between two servers crosses the
plane of the source GPU's NIC; between GPUs on different planes it is forwarded over NVLink
to the GPU on the destination's plane first (or after, on the destination server), as
NCCL's PXN does — the planes share no switch. Bisection: each plane's leaf–spine layer
carries ``nodes × NICs per plane × NIC bandwidth / (2 · oversubscription)`` across any
halving of its leaves; the fabric P times that.

Folding (:mod:`clustersim.parallel.fold_routes`) compares levels with the plane counted as a
site: two GPUs on one server, under one leaf (so one plane), on two leaves of one plane
(leaf–spine–leaf, as on a fat tree), or on two planes — that last level is
position-dependent (the message is forwarded over NVLink at either end, an ECMP choice), so
folding is refused where a compared pair sits on two planes. With one GPU per NIC and TP
filling a server, every twin's pipeline sends and data-parallel ring stay on their own
plane, and the rail-aligned rings (:mod:`clustersim.collectives.rail_rings`) keep every
crossing there too.
"""

from __future__ import annotations

import re
from typing import Literal

import networkx as nx

from ..errors import ScenarioError
from .clos import LeafSpineFields
from .graph import add_link, count_field, oversubscription_ratio
from .plugin import TOPOLOGIES, Placements, Site, Topology, levels
from .servers import add_server


class MultiPlaneOptions(LeafSpineFields):
    """``cluster.topology`` of ``multi_plane`` (module docstring): each plane a leaf–spine tier."""

    kind: Literal["multi_plane"]
    planes: int | None = None


def build_multi_plane(site: Site) -> nx.DiGraph:
    """Build a multi-plane fabric; see the module docstring for fields."""
    opts, spec, tf = site.options, site.servers, site.topology_field
    nics = spec.nics_per_node
    planes = nics if opts.planes is None else count_field(opts.planes, f"{tf}.planes")
    if nics % planes:
        raise ScenarioError(f"{tf}.planes", planes, f"a divisor of the {nics} NICs per server")
    per_leaf = (
        spec.nodes
        if opts.nodes_per_leaf is None
        else count_field(opts.nodes_per_leaf, f"{tf}.nodes_per_leaf")
    )
    leaves = -(-spec.nodes // per_leaf)
    spines = (1 if leaves > 1 else 0) if opts.spines is None else count_field(opts.spines, f"{tf}.spines", 0)
    if leaves > 1 and spines == 0:
        raise ScenarioError(
            f"{tf}.spines", 0, f"at least 1: a plane of {leaves} leaves needs spines to join them"
        )
    oversub = oversubscription_ratio(opts.oversubscription, f"{tf}.oversubscription")
    uplink = per_leaf * (nics // planes) * spec.nic_bandwidth / (oversub * spines) if spines else 0.0
    uplink_lat = spec.nic_latency / 2 if opts.latency is None else opts.latency
    g = nx.DiGraph()
    for p in range(planes):
        for leaf in range(leaves):
            g.add_node(f"plane{p}.leaf{leaf}", kind="switch")
            for s in range(spines):
                add_link(g, f"plane{p}.leaf{leaf}", f"plane{p}.spine{s}", uplink, uplink_lat, "fabric")
                g.nodes[f"plane{p}.spine{s}"]["kind"] = "switch"
    for n in range(spec.nodes):
        for k, nic in enumerate(add_server(g, spec, n)):
            add_link(
                g,
                nic,
                f"plane{k % planes}.leaf{n // per_leaf}",
                spec.nic_bandwidth,
                spec.nic_latency / 2,
                "nic",
            )
    g.graph["border"] = [f"plane{p}.{'spine0' if spines else 'leaf0'}" for p in range(planes)]
    return g


#: level 3 of :data:`clustersim.parallel.fold_routes.LEVELS` (two sites): here two planes
CROSS_PLANE = 3
_PLANE = re.compile(r"plane(\d+)\.")


def plane_placement(g: nx.DiGraph) -> Placements | str:
    """Levels with each GPU's plane as its site index, the cross-plane level marked
    position-dependent (module docstring); inside a wan, where the site index is taken, a
    reason."""
    where = levels(g)
    if any(site for site, _, _ in where.values()):
        return "multi_plane sites of a wan: their planes are not compared (folding is not checked there)"
    out = {}
    for gpu, (_, leaves, host) in where.items():
        (plane,) = {int(_PLANE.search(leaf)[1]) for leaf in leaves}  # one NIC, one plane
        out[gpu] = (plane, leaves, host)
    why = "routes between two planes of a multi_plane fabric forward over NVLink at either end by ECMP"
    return Placements(out, {CROSS_PLANE: why})


TOPOLOGIES.add(
    Topology(
        "multi_plane",
        "independent scale-out planes: NIC k of every server on plane k mod P (leaf–spine each)",
        factory=build_multi_plane,
        options=MultiPlaneOptions,
        placement=plane_placement,
    )
)
