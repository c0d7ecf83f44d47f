"""Routing: shortest paths, ECMP spread, determinism, intra-node locality."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from itertools import pairwise

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.errors import ScenarioError
from clustersim.topology import Router, build_topology

from .test_topology import EVERY_KIND, cluster


def fat_tree(nodes=4, gpn=8, **topo):
    return build_topology(cluster(nodes, gpn, {"kind": "fat_tree", **topo}))


@pytest.mark.parametrize("kind", sorted(EVERY_KIND))
@given(data=st.data())
@settings(max_examples=15, deadline=None)
def test_routes_are_shortest_paths(kind, data):
    g = build_topology(EVERY_KIND[kind])
    router = Router(g)
    n = sum(1 for _, k in g.nodes(data="kind") if k == "gpu")
    src, dst = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))
    path = router.path(f"gpu{src}", f"gpu{dst}", data.draw(st.integers(0, 7)))
    assert path[0] == f"gpu{src}" and path[-1] == f"gpu{dst}"
    assert all(g.has_edge(u, v) for u, v in pairwise(path))
    assert len(path) - 1 == nx.shortest_path_length(g, f"gpu{src}", f"gpu{dst}")


@pytest.mark.parametrize("kind", ["fat_tree", "leaf_spine", "star", "wan", "single_node"])
def test_routes_inside_a_node_stay_on_its_switch(kind):
    g = build_topology(EVERY_KIND[kind])
    router = Router(g)
    gpus = [n for n, k in g.nodes(data="kind") if k == "gpu"]
    for a in gpus:
        for b in gpus:
            if a != b and g.nodes[a]["host"] == g.nodes[b]["host"]:
                path = router.path(a, b)
                assert len(path) == 3, path
                assert g.nodes[path[1]]["kind"] == "switch" and g.nodes[path[1]]["host"] == g.nodes[a]["host"]


def test_ecmp_spreads_eight_flows_over_four_spines():
    router = Router(fat_tree(4, 8, nodes_per_leaf=1, spines=4))
    for shift in range(8):  # every shift permutation from leaf0's 8 GPUs to leaf1's 8 GPUs
        spines = Counter(router.path(f"gpu{i}", f"gpu{8 + (i + shift) % 8}")[3] for i in range(8))
        assert set(spines) == {f"spine{s}" for s in range(4)}
        assert max(spines.values()) <= 3
    keyed = Counter(router.path("gpu0", "gpu8", flow_key=k)[3] for k in range(8))
    assert max(keyed.values()) <= 3 and len(keyed) == 4


def test_all_pairs_load_every_spine_equally():
    """Cross-leaf all-pairs traffic: each leaf uplink carries total / spines flows."""
    g = fat_tree(4, 8, nodes_per_leaf=2, spines=4)
    router = Router(g)
    load = Counter()
    for a in range(32):
        for b in range(32):
            if a // 16 != b // 16:
                path = router.path(f"gpu{a}", f"gpu{b}")
                load[path[3], path[4]] += 1  # (leaf, spine)
    cross = 2 * 16 * 16
    assert set(load.values()) == {cross // (2 * 4)}


def test_same_flow_same_path_and_paths_are_cached():
    g = fat_tree()
    r1, r2 = Router(g), Router(g)
    assert r1.path("gpu0", "gpu31", 5) == r2.path("gpu0", "gpu31", 5)
    assert r1.path("gpu0", "gpu31", 5) is r1.path("gpu0", "gpu31", 5)


def test_paths_do_not_depend_on_python_hash_seed():
    code = (
        "from clustersim.topology import Router, build_topology\n"
        "from tests.test_topology import cluster\n"
        "r = Router(build_topology(cluster(4, 8, {'kind': 'fat_tree', 'nodes_per_leaf': 1})))\n"
        "print([r.path('gpu0', f'gpu{i}', key)[3] for i in range(8, 32) for key in ('a', 'b', None)])"
    )
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(
            subprocess.run(
                [sys.executable, "-c", code],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=os.path.dirname(os.path.dirname(__file__)),
            ).stdout
        )
    assert len(outs) == 1


def test_torus_takes_the_shorter_way_round():
    g = build_topology(cluster(1, 8, {"kind": "ring"}))
    assert Router(g).path("gpu0", "gpu6") == ("gpu0", "gpu7", "gpu6")


def test_unknown_node_and_unreachable_node():
    g = fat_tree()
    with pytest.raises(ScenarioError) as info:
        Router(g).path("gpu0", "gpu99")
    assert (info.value.field, info.value.value) == ("route.dst", "gpu99")
    g.add_node("island", kind="host")
    with pytest.raises(ScenarioError) as info:
        Router(g).path("gpu0", "island")
    assert info.value.field == "route.dst" and "no links lead there" in str(info.value)


@pytest.mark.parametrize("kind,nodes", [("single_node", 1), ("fat_tree", 2)])
@pytest.mark.parametrize("nics", [1, 2])
def test_gpus_sharing_a_nic_talk_through_their_switch_not_the_nic(kind, nodes, nics):
    # A NIC joined to several GPUs by free wires is as few hops away as the intra-node
    # switch; a route between two GPUs of one server must still take the switch, at its
    # latency and bandwidth, never the free wires through the NIC.
    c = cluster(nodes, 4, {"kind": kind})
    c["nic"] = dict(c["nic"], per_node=nics)
    g = build_topology(c)
    router = Router(g)
    for host in range(nodes):
        gpus = [f"gpu{4 * host + j}" for j in range(4)]
        for a in gpus:
            for b in gpus:
                if a != b:
                    assert router.path(a, b) == (
                        a,
                        f"nvswitch{host}" if kind == "fat_tree" else "nvswitch0",
                        b,
                    )
                    assert router.cost(a, b) == (c["intra_node"]["latency"], c["intra_node"]["bandwidth"])
