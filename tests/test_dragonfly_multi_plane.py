"""Dragonfly, multi-plane and rail-only topologies: routes (hop counts between groups,
planes joined only over NVLink — PXN) and bisection by max-flow against the closed forms;
bad options refused. (More on rail-only routes: tests/test_rail_topology.py.)"""

from __future__ import annotations

import networkx as nx
import pytest

from clustersim.collectives.bench import preset_cluster
from clustersim.errors import ScenarioError
from clustersim.topology import build_topology
from clustersim.topology.routing import Router

NIC = 400e9 / 8 * 0.94  # dgx_h100's NDR NIC as the preset delivers it


def cluster(nodes: int, topology: dict) -> dict:
    c = preset_cluster("dgx_h100", nodes)
    c["topology"] = topology
    return c


def switches(path) -> list[str]:
    return [x for x in path if x.startswith(("g", "plane")) and not x.startswith("gpu")]


def max_flow(g: nx.DiGraph, a: set[int], b: set[int]) -> float:
    """Bytes/s the GPUs of hosts ``a`` can push to those of hosts ``b`` at once."""
    h = nx.DiGraph()
    for u, v, data in g.edges(data=True):
        h.add_edge(u, v, capacity=data["bandwidth"])
    for node, data in g.nodes(data=True):
        if data.get("kind") == "gpu":
            if data["host"] in a:
                h.add_edge("SRC", node)  # no capacity: unbounded
            elif data["host"] in b:
                h.add_edge(node, "DST")
    return nx.maximum_flow_value(h, "SRC", "DST")


DF = {"kind": "dragonfly", "groups": 4, "routers_per_group": 2, "nodes_per_router": 1}


def test_dragonfly_routes_are_minimal():
    g = build_topology(cluster(8, DF))
    r = Router(g)
    # same router (nodes_per_router 2 below): 1 switch; same group: 2; two groups: at most
    # 3 router hops (local–global–local), by the shortest routes
    assert switches(r.path("gpu0", "gpu8")) == ["g0r0", "g0r1"]  # servers 0, 1: group 0
    for dst in range(16, 64, 8):  # every other group
        path = switches(r.path("gpu0", f"gpu{dst}"))
        groups = [s.split("r")[0] for s in path]
        assert 2 <= len(path) <= 4 and groups[0] == "g0" and groups[-1] != "g0"
    # the global link between two groups is one hop: server 2 sits on g1r0, joined to g0r0
    assert switches(r.path("gpu0", "gpu16")) == ["g0r0", "g1r0"]
    two = build_topology(cluster(8, {**DF, "groups": 2, "nodes_per_router": 2}))
    assert switches(Router(two).path("gpu0", "gpu8")) == ["g0r0"]


@pytest.mark.parametrize("links", [1, 2])
def test_dragonfly_bisection_is_the_global_links(links):
    # 4 groups cut 2 | 2: (G/2)² · global_links links of the NIC's rate each way
    g = build_topology(cluster(8, {**DF, "global_links": links}))
    assert max_flow(g, {0, 1, 2, 3}, {4, 5, 6, 7}) == pytest.approx(4 * links * NIC, rel=1e-12)


def test_multi_plane_routes_cross_planes_only_over_nvlink():
    g = build_topology(cluster(8, {"kind": "multi_plane", "planes": 8, "nodes_per_leaf": 4}))
    r = Router(g)
    assert switches(r.path("gpu0", "gpu8")) == ["plane0.leaf0"]
    assert switches(r.path("gpu0", "gpu40")) == ["plane0.leaf0", "plane0.spine0", "plane0.leaf1"]
    path = r.path("gpu0", "gpu33")  # GPU 1 of server 4: plane 1, PXN over server 0's NVSwitch
    assert "nvswitch0" in path and {s.split(".")[0] for s in switches(path)} == {"plane1"}
    # no switch of one plane links to a switch of another
    for u, v in g.edges:
        if u.startswith("plane") and v.startswith("plane"):
            assert u.split(".")[0] == v.split(".")[0]


@pytest.mark.parametrize("planes,oversub", [(8, 1.0), (2, 1.0), (4, 2.0)])
def test_multi_plane_bisection_closed_form(planes, oversub):
    # 8 servers, 2 leaves per plane: each plane carries nodes · NICs per plane · B / (2·oversub)
    topo = {"kind": "multi_plane", "planes": planes, "nodes_per_leaf": 4, "oversubscription": oversub}
    g = build_topology(cluster(8, topo))
    want = planes * 8 * (8 // planes) * NIC / (2 * oversub)
    assert max_flow(g, {0, 1, 2, 3}, {4, 5, 6, 7}) == pytest.approx(want, rel=1e-12)


def test_bad_options_are_refused():
    with pytest.raises(ScenarioError, match="holds 8 nodes"):
        build_topology(cluster(6, DF))
    with pytest.raises(ScenarioError, match="groups"):
        build_topology(cluster(8, {**DF, "groups": 1, "routers_per_group": 8}))
    with pytest.raises(ScenarioError, match="divisor"):
        build_topology(cluster(8, {"kind": "multi_plane", "planes": 3}))
    with pytest.raises(ScenarioError, match="needs spines"):
        build_topology(cluster(8, {"kind": "multi_plane", "nodes_per_leaf": 2, "spines": 0}))
    with pytest.raises(ScenarioError):
        build_topology(cluster(8, {**DF, "hops": 3}))  # unknown key


def test_rail_only_bisection_and_pxn_route():
    # rail-only: every rail switch joins NIC k of all servers — full bisection, nodes/2 ·
    # NICs · B — and a cross-rail message is forwarded over NVLink first (PXN)
    g = build_topology(cluster(8, {"kind": "rail"}))
    assert max_flow(g, {0, 1, 2, 3}, {4, 5, 6, 7}) == pytest.approx(4 * 8 * NIC, rel=1e-12)
    path = Router(g).path("gpu0", "gpu9")  # GPU 1 of server 1: rail 1
    assert [x for x in path if x.startswith("rail")] == ["rail1"] and (
        "nvswitch0" in path or "nvswitch1" in path
    )
