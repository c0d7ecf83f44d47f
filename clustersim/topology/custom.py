"""``custom``: any network, its nodes and links listed in the scenario.

The cluster's GPUs ``gpu0..gpu{N-1}`` (``N = nodes × gpus_per_node``) exist without being
listed; ``nodes`` lists the others (and may repeat a GPU to set its ``host``):

.. code-block:: yaml

    topology:
      kind: custom
      nodes:
        - {name: sw0, kind: switch, border: true}   # border: where a wan gateway attaches
      links:
        - {src: gpu0, dst: sw0, bandwidth: 25 GB/s, latency: 1 us}
        - {src: gpu1, dst: sw0, bandwidth: 25 GB/s}                    # latency 0
        - {src: sw0, dst: gpu1, bandwidth: 1 GB/s, bidirectional: false}

A link is bidirectional (one edge each way, same bandwidth and latency) unless
``bidirectional: false``. Errors name the item, e.g. ``cluster.topology.links[2].dst``.
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from ..errors import ScenarioError
from .graph import NODE_KINDS, Bandwidth, Latency, check_fields, count_field
from .plugin import TOPOLOGIES, Site, Topology, TopologyOptions


class CustomLink(TopologyOptions):
    """One item of a custom topology's ``links`` (module docstring), its quantities parsed."""

    src: str
    dst: str
    bandwidth: Bandwidth
    latency: Latency = 0.0
    bidirectional: bool = True


class CustomOptions(TopologyOptions):
    """``cluster.topology`` of ``custom`` (module docstring)."""

    kind: Literal["custom"]
    nodes: list = []
    links: list[CustomLink] | None = None


NODE_FIELDS = ("name", "kind", "host", "border")


def _add_nodes(g: nx.DiGraph, items: object, tf: str) -> list[str]:
    if not isinstance(items, list):
        raise ScenarioError(f"{tf}.nodes", items, "a list of {name, kind} mappings")
    border = []
    for i, item in enumerate(items):
        nf = f"{tf}.nodes[{i}]"
        if not isinstance(item, dict):
            raise ScenarioError(nf, item, "a mapping such as {name: sw0, kind: switch}")
        check_fields(item, NODE_FIELDS, nf)
        name, kind = item.get("name"), item.get("kind")
        if not isinstance(name, str) or not name:
            raise ScenarioError(f"{nf}.name", name, "a node name such as sw0")
        if kind not in NODE_KINDS:
            raise ScenarioError(f"{nf}.kind", kind, f"known: {', '.join(NODE_KINDS)}")
        if kind == "gpu" and name not in g:
            raise ScenarioError(f"{nf}.name", name, f"GPUs are gpu0..gpu{len(g) - 1} (nodes × gpus_per_node)")
        if kind != "gpu" and name in g:
            raise ScenarioError(f"{nf}.name", name, "a name not used by another node")
        attrs = {"kind": kind}
        if "host" in item:
            attrs["host"] = count_field(item["host"], f"{nf}.host", minimum=0)
        g.add_node(name, **attrs)
        if item.get("border"):
            border.append(name)
    return border


def _add_links(g: nx.DiGraph, items: list[CustomLink] | None, tf: str) -> None:
    if not items:
        raise ScenarioError(f"{tf}.links", items, "a non-empty list of {src, dst, bandwidth} mappings")
    for i, item in enumerate(items):
        lf = f"{tf}.links[{i}]"
        for end in ("src", "dst"):
            if getattr(item, end) not in g:
                raise ScenarioError(
                    f"{lf}.{end}", getattr(item, end), "a GPU (gpu0, gpu1, …) or a node listed in nodes"
                )
        src, dst = item.src, item.dst
        if src == dst:
            raise ScenarioError(f"{lf}.dst", dst, "a node other than src")
        edges = [(src, dst), (dst, src)] if item.bidirectional else [(src, dst)]
        for a, b in edges:
            if g.has_edge(a, b):
                raise ScenarioError(lf, f"{a}->{b}", "each directed link once; this one is listed twice")
            g.add_edge(a, b, bandwidth=item.bandwidth, latency=item.latency, kind="custom")


def build_custom(site: Site) -> nx.DiGraph:
    """Build the network listed in ``cluster.topology.nodes`` / ``links``."""
    spec, tf = site.servers, site.topology_field
    g = nx.DiGraph()
    for i in range(spec.num_gpus):
        g.add_node(f"gpu{i}", kind="gpu", host=i // spec.gpus_per_node)
    border = _add_nodes(g, site.options.nodes, tf)
    _add_links(g, site.options.links, tf)
    g.graph["border"] = border or ["gpu0"]
    return g


TOPOLOGIES.add(
    Topology(
        "custom",
        "any graph: listed nodes and links (servers built from the cluster)",
        factory=build_custom,
        options=CustomOptions,
    )
)
