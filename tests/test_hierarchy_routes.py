"""Routes named from a topology's hierarchy (clustersim/topology/hierarchy.py) are the
breadth-first router's, hop for hop and ECMP choice for choice, on random builds of every
hierarchical kind; every other graph is searched."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.topology import TOPOLOGIES, Router, build_topology
from clustersim.topology.plugin import levels

from .test_topology import EVERY_KIND, cluster

HIERARCHICAL = ("single_node", "fat_tree", "leaf_spine", "rail", "star")
FLOW_KEYS = (None, 0, 1, 2, 3, 5, 7, "dp", ("ch", 1))


def _searched(graph):
    """The same graph without its hierarchy: the router searches it breadth-first."""
    bare = graph.copy()
    del bare.graph["hierarchy"]
    return Router(bare)


@st.composite
def hierarchical_clusters(draw) -> dict:
    kind = draw(st.sampled_from(HIERARCHICAL))
    nodes = 1 if kind == "single_node" else draw(st.integers(1, 6))
    gpn = draw(st.integers(1 if kind != "single_node" else 2, 8))
    topo: dict = {"kind": kind}
    if kind in ("fat_tree", "leaf_spine"):
        topo["nodes_per_leaf"] = draw(st.integers(1, nodes))
        topo["spines"] = draw(st.integers(1, 11))  # > 10: "spine10" sorts before "spine2"
    elif kind == "rail":
        topo["spines"] = draw(st.integers(0, 3))
    elif kind == "star" and draw(st.booleans()):
        topo["server_bandwidth"] = "10 GB/s"
    return drawn_servers(draw, cluster(nodes, gpn, topo), gpn)


def drawn_servers(draw, c: dict, gpn: int) -> dict:
    """Cluster ``c`` (``gpn`` GPUs per node) with its servers drawn: NICs per node, NVSwitch
    or PCIe inside, and a PCIe link between GPU and NIC or none."""
    c["nic"] = dict(c["nic"], per_node=draw(st.integers(1, gpn)))
    if draw(st.booleans()):
        c["intra_node"] = dict(c["intra_node"], kind="pcie")
    if draw(st.booleans()):
        c["pcie"] = {"bandwidth": "32 GB/s", "latency": "1 us"}
    return c


@given(c=hierarchical_clusters())
@settings(max_examples=60, deadline=None)
def test_hierarchy_routes_are_the_searched_routes(c):
    g = build_topology(c)
    named, searched = Router(g), _searched(g)
    assert named.hierarchy is not None
    ends = [n for n, k in g.nodes(data="kind") if k in ("gpu", "server")]
    for src in ends:
        for dst in ends:
            for key in FLOW_KEYS:
                assert named.path(src, dst, key) == searched.path(src, dst, key), (src, dst, key)
    assert named._pred is None  # no pair needed the search
    assert levels(g) == levels(searched.graph)  # the fold check's placement, too


def test_every_shipped_kind_is_named_or_searched():
    # the hierarchical kinds declare their layout; the others (and every GPU of them) are
    # routed by the search — a new kind has to be put on one side
    for kind in TOPOLOGIES:
        g = build_topology(EVERY_KIND.get(kind) or cluster(2, 4, {"kind": kind}))
        assert ("hierarchy" in g.graph) == (kind in HIERARCHICAL), kind


@pytest.mark.parametrize("kind", sorted(set(EVERY_KIND) - set(HIERARCHICAL)))
def test_other_kinds_are_searched(kind):
    g = build_topology(EVERY_KIND[kind])
    router = Router(g)
    assert router.hierarchy is None
    assert router.path("gpu0", "gpu1") and router._pred is not None


def test_a_failed_link_leaves_the_routes_to_the_search():
    # gpu0's server has two NICs on leaf0; with node0.nic0's uplink cut, gpu0 reaches
    # another leaf over NVLink and the other NIC — a path no hierarchy names
    c = cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 2})
    c["nic"] = dict(c["nic"], per_node=2)
    c["failed_links"] = [["node0.nic0", "leaf0"]]
    g = build_topology(c)
    assert "hierarchy" not in g.graph
    assert Router(g).path("gpu0", "gpu8") == (
        "gpu0",
        "nvswitch0",
        "gpu2",
        "node0.nic1",
        "leaf0",
        "spine0",
        "leaf1",
        "node2.nic0",
        "gpu8",
    )
