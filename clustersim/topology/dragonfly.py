"""``dragonfly``: groups of routers, all-to-all inside a group, global links between groups
(Kim, Dally, Scott & Abts, "Technology-Driven, Highly-Scalable Dragonfly Topology", ISCA
2008; the Slingshot and Aries fabrics).

Fields:

* ``groups`` — G ≥ 2 groups (default: ``nodes`` / (a·p)); ``routers_per_group`` — a
  routers in each (default 1), every pair of them joined by a local link;
  ``nodes_per_router`` — p servers on each router (default 1; all of a server's NICs on
  it): ``nodes`` must be G·a·p;
* ``global_links`` — links between every pair of groups (default 1), spread over a group's
  routers in turn (global link k of a group leaves from its router k mod a);
* ``local_bandwidth`` / ``global_bandwidth`` — per link and direction (default: the NIC's);
  ``latency`` — of a local or global link (default: the NIC's).

``routing`` (:mod:`.dragonfly_routing`): ``shortest`` (default) — shortest by hops, ECMP
among equals: inside a router's servers one switch; inside a group router → router;
between groups at most three router hops — local → global → local, or, where it is as
short, global → local → global through a third group (ECMP may take either);
``minimal`` — always one global link (local → global → local); ``valiant`` — minimal to
an intermediate group, then minimal to the destination; ``ugal`` — per flow, minimal or
Valiant by the load where they part (UGAL-L; ``simulation.network: flow``). Bisection: cutting the
groups in halves cuts (G/2)²·``global_links`` global links each way (G even).
Folding is refused (routes depend on where a GPU sits).
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from ..errors import ScenarioError
from .dragonfly_routing import DragonflyWaypoints
from .graph import Bandwidth, Latency, add_link, count_field
from .plugin import TOPOLOGIES, Site, Topology, TopologyOptions
from .servers import add_server


class DragonflyOptions(TopologyOptions):
    """``cluster.topology`` of ``dragonfly`` (module docstring)."""

    kind: Literal["dragonfly"]
    groups: int | None = None
    routers_per_group: int = 1
    nodes_per_router: int = 1
    global_links: int = 1
    local_bandwidth: Bandwidth | None = None
    global_bandwidth: Bandwidth | None = None
    latency: Latency | None = None
    routing: Literal["shortest", "minimal", "valiant", "ugal"] = "shortest"


def router(group: int, r: int) -> str:
    """The name of router ``r`` of group ``group``."""
    return f"g{group}r{r}"


def build_dragonfly(site: Site) -> nx.DiGraph:
    """Build a dragonfly; see the module docstring for fields."""
    opts, spec, tf = site.options, site.servers, site.topology_field
    a = count_field(opts.routers_per_group, f"{tf}.routers_per_group")
    p = count_field(opts.nodes_per_router, f"{tf}.nodes_per_router")
    groups = count_field(
        spec.nodes // (a * p) if opts.groups is None else opts.groups, f"{tf}.groups", minimum=2
    )
    links = count_field(opts.global_links, f"{tf}.global_links")
    if spec.nodes != groups * a * p:
        raise ScenarioError(
            f"{site.field}.nodes",
            spec.nodes,
            f"a dragonfly of {groups} groups × {a} routers × {p} nodes per router holds {groups * a * p} nodes",
        )
    local = spec.nic_bandwidth if opts.local_bandwidth is None else opts.local_bandwidth
    glob = spec.nic_bandwidth if opts.global_bandwidth is None else opts.global_bandwidth
    lat = spec.nic_latency if opts.latency is None else opts.latency
    g = nx.DiGraph()
    for grp in range(groups):
        for r in range(a):
            g.add_node(router(grp, r), kind="switch")
        for r in range(a):
            for s in range(r + 1, a):
                add_link(g, router(grp, r), router(grp, s), local, lat, "fabric")
    used = [0] * groups  # global links each group has placed so far
    gateways: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for i in range(groups):
        for j in range(i + 1, groups):
            for _ in range(links):
                u, v = router(i, used[i] % a), router(j, used[j] % a)
                used[i], used[j] = used[i] + 1, used[j] + 1
                if (u, v) not in gateways.setdefault((i, j), []):
                    gateways[i, j].append((u, v))
                    gateways.setdefault((j, i), []).append((v, u))
                if g.has_edge(u, v):  # two global links between one router pair: one link of both
                    g.edges[u, v]["bandwidth"] += glob
                    g.edges[v, u]["bandwidth"] += glob
                else:
                    add_link(g, u, v, glob, lat, "fabric")
    for n in range(spec.nodes):
        home = router(n // (a * p), (n // p) % a)
        for nic in add_server(g, spec, n):
            add_link(g, nic, home, spec.nic_bandwidth, spec.nic_latency / 2, "nic")
    g.graph["border"] = [router(grp, 0) for grp in range(groups)]
    if opts.routing != "shortest":
        g.graph["waypoints"] = DragonflyWaypoints(
            opts.routing, groups, a * p, {k: tuple(v) for k, v in gateways.items()}
        )
    return g


TOPOLOGIES.add(
    Topology(
        "dragonfly",
        "dragonfly: router groups, all-to-all inside, global links between groups",
        factory=build_dragonfly,
        options=DragonflyOptions,
    )
)
