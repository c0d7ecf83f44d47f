"""``wan``: several sites (data centres, campuses), each a cluster of any other kind,
joined by long-haul links.

Fields:

* ``sites`` — a list; each item is a partial cluster dict (``nodes``, ``gpus_per_node``,
  ``intra_node``, ``nic``, ``pcie``, ``topology``) whose missing keys are inherited from
  the enclosing cluster (``topology`` defaults to ``auto``);
* ``bandwidth``, ``latency`` — of every long-haul link, e.g. ``"1 Gbit/s"``, ``"30 ms"``;
* ``links`` — optional list of ``{src: site index, dst: site index, bandwidth?, latency?}``;
  when absent every pair of sites is joined (full mesh).

GPUs are numbered across sites in order (site 0's first, then site 1's …), and so are
servers (the ``host`` attribute). Every other node of site ``k`` is renamed
``site{k}.<name>``. Each site gets a gateway router ``site{k}.gw`` joined by free wires to
the site's border (its spines, its star centre, its NICs for a single node, its first
GPU for a ring or torus, the ``border: true`` nodes of a custom site), so the long-haul
links are the only cost of leaving a site beyond the site's own network.
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from ..errors import ScenarioError
from .graph import Bandwidth, Latency, add_link, add_wire, gpu_names
from .plugin import TOPOLOGIES, Site, Topology, TopologyOptions, levels


class WanLink(TopologyOptions):
    """One item of a wan's ``links`` (module docstring): unset quantities are the wan's."""

    src: int
    dst: int
    bandwidth: Bandwidth | None = None
    latency: Latency | None = None


class WanOptions(TopologyOptions):
    """``cluster.topology`` of ``wan`` (module docstring)."""

    kind: Literal["wan"]
    sites: list | None = None
    bandwidth: Bandwidth | None = None
    latency: Latency = 0.0
    links: list[WanLink] | None = None


_INHERITED = ("gpus_per_node", "intra_node", "nic", "pcie")


def _site_cluster(parent: dict, site: object, field: str) -> dict:
    if not isinstance(site, dict):
        raise ScenarioError(field, site, "a site is a mapping such as {nodes: 2, topology: {kind: fat_tree}}")
    merged = {k: parent[k] for k in _INHERITED if k in parent}
    merged.update(site)
    merged.setdefault("nodes", 1)
    merged.setdefault("topology", {"kind": "auto"})
    topo = merged["topology"] or {}
    if not isinstance(topo, dict):
        raise ScenarioError(f"{field}.topology", topo, "a mapping such as {kind: fat_tree}")
    kind = topo.get("kind")
    if kind == "wan":
        raise ScenarioError(f"{field}.topology.kind", kind, "a site cannot itself be a wan")
    return merged


def build_wan(site: Site) -> nx.DiGraph:
    """Build a multi-site cluster; see the module docstring for fields."""
    from .registry import build_site  # registry imports this module

    opts, cluster, tf = site.options, site.cluster, site.topology_field
    sites = opts.sites
    if not isinstance(sites, list) or not sites:
        raise ScenarioError(
            f"{tf}.sites", sites, "a non-empty list of sites, each a cluster such as {nodes: 2}"
        )
    bw, lat = opts.bandwidth, opts.latency

    g = nx.DiGraph()
    gpu_off = host_off = 0
    for k, part in enumerate(sites):
        sf = f"{tf}.sites[{k}]"
        sub_cluster = _site_cluster(cluster, part, sf)
        sub = build_site(sub_cluster, sf)
        n_gpus = len(gpu_names(sub))

        def rename(name: str, k: int = k, off: int = gpu_off, sub: nx.DiGraph = sub) -> str:
            if sub.nodes[name].get("kind") == "gpu":
                return f"gpu{int(name[3:]) + off}"
            return f"site{k}.{name}"

        border = [rename(b) for b in sub.graph.get("border", [])]
        sub = nx.relabel_nodes(sub, rename, copy=True)
        for _, data in sub.nodes(data=True):
            if "host" in data:
                data["host"] += host_off
            data["site"] = k
        g.update(sub)  # also copies the site's graph attributes
        g.graph.pop("hierarchy", None)  # the site's layout, under names this graph renamed
        gw = f"site{k}.gw"
        g.add_node(gw, kind="switch", site=k)
        for b in border:
            add_wire(g, gw, b)
        gpu_off += n_gpus
        host_off += sub_cluster["nodes"]

    links = opts.links
    if links is None:
        links = [WanLink(src=a, dst=b) for a in range(len(sites)) for b in range(a + 1, len(sites))]
    for i, link in enumerate(links):
        for end in ("src", "dst"):
            if not 0 <= getattr(link, end) < len(sites):
                raise ScenarioError(
                    f"{tf}.links[{i}].{end}", getattr(link, end), f"a site index 0..{len(sites) - 1}"
                )
    for link in links:
        link_bw = bw if link.bandwidth is None else link.bandwidth
        if link_bw is None:
            raise ScenarioError(f"{tf}.bandwidth", None, "the long-haul bandwidth, e.g. 1 Gbit/s")
        link_lat = lat if link.latency is None else link.latency
        add_link(g, f"site{link.src}.gw", f"site{link.dst}.gw", link_bw, link_lat, "wan")
    g.graph["sites"] = len(sites)
    return g


def wan_placement(g: nx.DiGraph):
    """Levels (site, leaf, server) when every site is the same hierarchical cluster and
    every pair of sites is joined alike; else why routes depend on the sites."""
    topo = g.graph["topology"]
    sites = topo.get("sites") or []
    if topo.get("links") is not None:
        return "wan links are listed per site pair and may differ"
    if any(site != sites[0] for site in sites):
        return "wan sites differ"
    site = _site_cluster({}, sites[0], "cluster.topology.sites[0]")
    kind = (site["topology"] or {}).get("kind", "auto")
    if kind == "auto":
        kind = "single_node" if site["nodes"] == 1 else "fat_tree"
    return levels(g) if TOPOLOGIES[kind].placement is levels else TOPOLOGIES[kind].placement(g)


def gpu_sites(g: nx.DiGraph) -> list[int]:
    """The site of every GPU of a built topology, in GPU index order (all 0 when ``g`` is
    not a wan: one site)."""
    return [g.nodes[n].get("site", 0) for n in gpu_names(g)]


TOPOLOGIES.add(
    Topology(
        "wan",
        "sites of any other kind joined by long-haul links",
        factory=build_wan,
        options=WanOptions,
        placement=wan_placement,
    )
)
