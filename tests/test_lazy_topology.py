"""Hierarchical builds written on first use (clustersim/topology/lazy.py): what their layouts
answer is what the written graph holds, node for node and pair for pair, and a lazy graph
behaves as the DiGraph it becomes."""

from __future__ import annotations

import copy
import pickle
import threading
from types import SimpleNamespace

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.collectives.group import Group
from clustersim.resolve import topology_graph
from clustersim.scenario import load_scenario
from clustersim.topology import Router, build_topology
from clustersim.topology.lazy import LazyDiGraph, has_node, link_data, node_data, successors

from .test_hierarchy_routes import drawn_servers
from .test_topology import _everything, cluster

LAZY = ("fat_tree", "leaf_spine", "rail")


@st.composite
def lazy_clusters(draw) -> dict:
    kind = draw(st.sampled_from(LAZY))
    nodes = draw(st.integers(1, 5))
    gpn = draw(st.integers(1, 6))
    topo: dict = {"kind": kind}
    if kind == "rail":
        topo["spines"] = draw(st.integers(0, 3))
    else:
        topo["nodes_per_leaf"] = draw(st.integers(1, nodes))
        topo["spines"] = draw(st.integers(1, 11))
        topo["oversubscription"] = draw(st.sampled_from([1, 1.5, 3]))
    return drawn_servers(draw, cluster(nodes, gpn, topo), gpn)


def _written(c: dict) -> nx.DiGraph:
    g = build_topology(c)
    len(g)  # reading it writes it
    assert type(g) is nx.DiGraph
    return g


def _not_nodes(c: dict) -> list[str]:
    """Names just past the end of every numbered family, and misspellings of real ones."""
    n, gpn = c["nodes"], c["gpus_per_node"]
    return [
        f"gpu{n * gpn}",
        "gpu01",
        "gpu-1",
        "gpu",
        f"nvswitch{n}",
        f"pcie{n}",
        f"node{n}.nic0",
        f"node0.nic{c['nic']['per_node']}",
        "node0.nic",
        "node0nic0",
        "leaf99",
        "spine99",
        "rail99",
        "server",
        "hub",
        "",
    ]


@given(c=lazy_clusters())
@settings(max_examples=40, deadline=None)
def test_the_layout_answers_what_the_written_graph_holds(c):
    lazy, written = build_topology(c), _written(c)
    assert type(lazy) is LazyDiGraph
    for name, data in written.nodes(data=True):
        assert has_node(lazy, name) and node_data(lazy, name) == data, name
        if data["kind"] == "gpu":  # (the layouts answer for GPUs; the graph for the rest)
            assert successors(lazy, name) == list(written.succ[name]), name
    for name in _not_nodes(c):
        assert has_node(lazy, name) == (name in written), name
        if name not in written:
            with pytest.raises(KeyError):
                node_data(lazy, name)
    names = [*written, *_not_nodes(c)[:3]]
    for u in names:
        for v in names:
            if written.has_edge(u, v):
                assert list(link_data(lazy, u, v).items()) == list(written.edges[u, v].items()), (u, v)
            else:
                with pytest.raises(KeyError):
                    link_data(lazy, u, v)
    assert type(lazy) is LazyDiGraph  # none of it wrote the graph
    assert lazy.graph == written.graph


@given(c=lazy_clusters())
@settings(max_examples=20, deadline=None)
def test_routes_costs_and_collective_shapes_need_no_written_graph(c):
    lazy, written = build_topology(c), _written(c)
    gpus = [f"gpu{i}" for i in range(c["nodes"] * c["gpus_per_node"])]
    on_lazy, on_written = Router(lazy), Router(written)
    for src in gpus:
        for dst in gpus:
            for key in (None, 1, "dp"):
                assert on_lazy.path(src, dst, key) == on_written.path(src, dst, key)
                assert on_lazy.cost(src, dst, key) == on_written.cost(src, dst, key)
    for graph in (lazy, written):
        graph.shape = Group(None, SimpleNamespace(graph=graph), gpus[::-1]).shape()
    assert lazy.shape == written.shape
    assert type(lazy) is LazyDiGraph


def test_reading_it_makes_the_plain_graph_the_builder_writes():
    c = cluster(3, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 3})
    lazy = build_topology(c)
    assert isinstance(lazy, nx.DiGraph)
    assert nx.shortest_path_length(lazy, "gpu0", "gpu11") == 6  # any networkx call writes it
    assert type(lazy) is nx.DiGraph and "_layout" not in vars(lazy)
    assert _everything(lazy)[1:] == _everything(_written(c))[1:]  # (its views cached as well)


@pytest.mark.parametrize(
    "use",
    [
        lambda g: g.copy(),
        lambda g: g.subgraph(["gpu0", "nvswitch0"]).copy(),
        lambda g: g.reverse(),
        lambda g: nx.relabel_nodes(g, {"gpu0": "first"}),
        copy.deepcopy,
        lambda g: pickle.loads(pickle.dumps(g)),
    ],
)
def test_what_is_made_from_a_lazy_graph_is_what_is_made_from_the_written_one(use):
    c = cluster(2, 4, {"kind": "rail", "spines": 2})
    made, expected = use(build_topology(c)), use(_written(c))
    len(made)  # a copy or a pickle of a lazy graph may be lazy too
    assert _everything(made) == _everything(expected) and made.graph == expected.graph


def test_changing_a_lazy_graph_writes_it_first():
    c = cluster(2, 2, {"kind": "fat_tree"})
    g, written = build_topology(c), _written(c)
    g.remove_edge("gpu0", "nvswitch0")
    written.remove_edge("gpu0", "nvswitch0")
    assert _everything(g) == _everything(written)
    with pytest.raises(KeyError):
        link_data(g, "gpu0", "nvswitch0")  # answered from the graph now, not the layout


def test_a_plain_lazy_digraph_is_an_empty_digraph():
    g = LazyDiGraph([("a", "b")], name="x")
    assert type(g) is nx.DiGraph and list(g.edges) == [("a", "b")] and g.name == "x"


def test_a_folded_analytical_run_on_a_fat_tree_never_writes_its_graph():
    raw = {
        "cluster": {"preset": "dgx_h100", "nodes": 32},
        "model": {"kind": "transformer", "preset": "gpt-1.3b"},
        "training": {"global_batch": 64, "micro_batch": 1},
        "parallel": {"tp": 8, "pp": 4, "dp": 8, "schedule": "1f1b", "zero": 1},
        "simulation": {
            "network": "analytical",
            "collective_model": "analytical",
            "granularity": "stage",
            "fold": True,
        },
    }
    result = cs.simulate(raw, progress=False)
    assert result.summary["folded"].startswith("yes")
    assert type(topology_graph(load_scenario(raw).cluster)) is LazyDiGraph


def test_threads_reading_one_lazy_graph_all_see_it_whole():
    c = cluster(16, 8, {"kind": "fat_tree", "nodes_per_leaf": 2})
    lazy, expected = build_topology(c), _everything(_written(c))[1:]
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(_everything(lazy)[1:])) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(s == expected for s in seen)
