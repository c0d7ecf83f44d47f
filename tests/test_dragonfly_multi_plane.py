"""Dragonfly, multi-plane and rail-only topologies: routes (hop counts between groups,
minimal and Valiant dragonfly routing, planes joined only over NVLink — PXN) and bisection by max-flow against the closed forms;
bad options refused. (More on rail-only routes: tests/test_rail_topology.py.)"""

from __future__ import annotations

import networkx as nx
import pytest
import simpy

from clustersim.collectives.bench import preset_cluster
from clustersim.errors import ScenarioError
from clustersim.network.flow import FlowFabric
from clustersim.record import Recorder
from clustersim.topology import build_topology
from clustersim.topology.routing import Router
from tests.test_nccl_algorithms import one_gpu_per_node

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
    with pytest.raises(ScenarioError, match="routing"):
        build_topology(cluster(8, {**DF, "routing": "adaptive"}))


def test_rail_only_bisection_and_pxn_route():
    # rail-only: every rail switch joins NIC k of all servers — full bisection, nodes/2 ·
    # NICs · B — and a cross-rail message is forwarded over NVLink first (PXN)
    g = build_topology(cluster(8, {"kind": "rail"}))
    assert max_flow(g, {0, 1, 2, 3}, {4, 5, 6, 7}) == pytest.approx(4 * 8 * NIC, rel=1e-12)
    path = Router(g).path("gpu0", "gpu9")  # GPU 1 of server 1: rail 1
    assert [x for x in path if x.startswith("rail")] == ["rail1"] and (
        "nvswitch0" in path or "nvswitch1" in path
    )


def global_links(path) -> int:
    """Router-to-router hops between two groups on ``path``."""
    sw = switches(path)
    return sum(u.split("r")[0] != v.split("r")[0] for u, v in zip(sw, sw[1:]))


def test_dragonfly_minimal_and_valiant_routes():
    # 4 groups × 2 routers × 1 server, 1 GPU per server: every pair of servers
    cl = one_gpu_per_node(8, NIC)
    shortest, minimal, valiant = (
        Router(build_topology({**cl, "topology": {**DF, "routing": r}}))
        for r in ("shortest", "minimal", "valiant")
    )
    detours = 0
    for s in range(8):
        for d in range(8):
            if s == d:
                continue
            src, dst = f"gpu{s}", f"gpu{d}"
            if s // 2 == d // 2:  # one group: every policy takes the local link
                assert minimal.path(src, dst) == valiant.path(src, dst) == shortest.path(src, dst)
                continue
            detours += global_links(shortest.path(src, dst)) == 2  # ECMP through a third group
            m, v = minimal.path(src, dst), valiant.path(src, dst)
            assert global_links(m) == 1 and len(switches(m)) <= 4  # local, global, local at most
            # Valiant: minimal to a third group, then minimal on — two global links, the
            # middle group neither end's
            groups = [sw.split("r")[0] for sw in switches(v)]
            assert global_links(v) == 2 and groups[0] == f"g{s // 2}" and groups[-1] == f"g{d // 2}"
            assert len(set(groups)) == 3
            assert len(set(v)) == len(v)  # no loops
    assert detours > 0  # shortest-hop ECMP does leave through third groups: minimal differs


def test_valiant_beats_minimal_on_the_adversarial_pattern():
    # 6 groups of one router with 4 servers; every server sends S to its twin in the next
    # group. Minimal: a group's 4 flows share its one global link to the next group — 4S/Bg.
    # Valiant: a group's 4 servers spread over the 4 other groups, so every global link
    # except i → i+1 carries one first leg and one second leg: 2 flows at Bg/2 — 2S/Bg,
    # (G − 2)/2 = 2 × faster (max-min flow model, NICs faster than Bg/2)
    groups, per, bg, size = 6, 4, 10e9, 64 << 20
    ends = {routing: max(shift(routing, groups, per, bg, size)[1]) for routing in ("minimal", "valiant")}
    assert ends["minimal"] == pytest.approx(per * size / bg, rel=1e-6)
    assert ends["valiant"] == pytest.approx(2 * size / bg, rel=1e-6)


def shift(routing: str, groups: int = 6, per: int = 4, bg: float = 10e9, size: int = 64 << 20):
    """Every server sends ``size`` to its twin in the next group at once (the adversarial
    pattern above) on the flow model: (its fabric with the flows in flight, each flow's end)."""
    cl = one_gpu_per_node(groups * per, 4 * bg)
    cl["topology"] = {
        "kind": "dragonfly",
        "groups": groups,
        "nodes_per_router": per,
        "global_bandwidth": bg,
        "routing": routing,
    }
    env = simpy.Environment()
    fabric = FlowFabric(env, Recorder(), build_topology(cl))
    done = []
    for n in range(groups * per):
        fabric.transfer(f"gpu{n}", f"gpu{(n + per) % (groups * per)}", size).callbacks.append(
            lambda e: done.append(e.env.now)
        )
    routes = [[link.name for link in links] for links, _ in fabric.flows()]
    env.run()
    return routes, done


def test_ugal_spreads_the_adversarial_pattern_as_valiant_does():
    """UGAL-L on the shift: each group's first flow finds its minimal queue empty and goes
    minimal; a later one goes Valiant while its Valiant queue holds fewer flows than its
    minimal one (the queues weighted by the routes' lengths). The flows so spread put at
    most two on any global link — a first leg and a second, or two minimal flows — so the
    last flow ends at Valiant's 2S/B_g (to 1e-6), half minimal's 4S/B_g."""
    groups, per, bg, size = 6, 4, 10e9, 64 << 20
    routes, done = shift("ugal", groups, per, bg, size)
    glob = [[n for n in r if global_links(n.split("->"))] for r in routes]  # its global links
    assert groups <= sum(len(g) == 1 for g in glob) < len(glob)  # some minimal, some Valiant
    assert all(len(g) <= 2 for g in glob)
    per_link = {}
    for g in glob:
        for link in g:
            per_link[link] = per_link.get(link, 0) + 1
    assert max(per_link.values()) == 2
    assert max(done) == pytest.approx(2 * size / bg, rel=1e-6)
    assert max(shift("valiant", groups, per, bg, size)[1]) == pytest.approx(max(done), rel=1e-6)


def test_ugal_is_minimal_without_contention():
    """Uniform random traffic, one flow at a time (each starts on an idle network): every
    UGAL queue is empty, so every flow takes its minimal route — the same links and the same
    end times as minimal routing, to the bit; a route asked for without load is minimal's."""
    import random

    rng = random.Random(7)
    pairs = [tuple(rng.sample(range(24), 2)) for _ in range(60)]
    ends = {}
    for routing in ("minimal", "ugal"):
        cl = one_gpu_per_node(24, 40e9)
        cl["topology"] = {"kind": "dragonfly", "groups": 6, "routers_per_group": 2, "nodes_per_router": 2}
        cl["topology"]["routing"] = routing
        env = simpy.Environment()
        fabric = FlowFabric(env, Recorder(), build_topology(cl))
        log = []

        def run(fabric=fabric, log=log):
            for s, d in pairs:
                ev = fabric.transfer(f"gpu{s}", f"gpu{d}", 8 << 20)
                log.append([link.name for link in fabric.flows()[0][0]])
                yield ev
                log.append(fabric.env.now)

        env.process(run())
        env.run()
        ends[routing] = log
        if routing == "ugal":
            minimal = Router(build_topology({**cl, "topology": {**cl["topology"], "routing": "minimal"}}))
            assert all(
                fabric.router.path(f"gpu{s}", f"gpu{d}") == minimal.path(f"gpu{s}", f"gpu{d}")
                for s, d in pairs
            )
    assert ends["ugal"] == ends["minimal"]


def test_ugal_needs_the_flow_model():
    """The packet and analytical models route statically: ugal is refused naming the field."""
    from clustersim.network.factory import build_fabric

    cl = one_gpu_per_node(8, NIC)
    g = build_topology({**cl, "topology": {**DF, "routing": "ugal"}})
    for model in ("packet", "analytical"):
        with pytest.raises(ScenarioError, match=r"^cluster\.topology\.routing"):
            build_fabric(model, simpy.Environment(), Recorder(), g)
    assert build_fabric("flow", simpy.Environment(), Recorder(), g).adaptive_routing


def test_ugal_routes_refuse_an_unknown_gpu_naming_the_end():
    r = Router(build_topology({**one_gpu_per_node(8, NIC), "topology": {**DF, "routing": "ugal"}}))
    for ask in (r.path, r.choices):
        with pytest.raises(ScenarioError, match=r"^route\.dst"):
            ask("gpu0", "gpu99")
        with pytest.raises(ScenarioError, match=r"^route\.src"):
            ask("gpu99", "gpu0")
    assert len(r.choices("gpu0", "gpu7")) == 2 and r.choices("gpu0", "gpu7")[0] == r.path("gpu0", "gpu7")
