"""Topology builders: shape, link attributes, and errors that name the field."""

from __future__ import annotations

import math
from itertools import pairwise

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.errors import ScenarioError
from clustersim.scenario import load_scenario
from clustersim.topology import NODE_KINDS, TOPOLOGIES, build_topology, is_wire


def cluster(nodes=2, gpn=8, topology=None, **over) -> dict:
    """A resolved cluster dict as the scenario layer hands it over."""
    out = {
        "nodes": nodes,
        "gpus_per_node": gpn,
        "intra_node": {"kind": "nvswitch", "bandwidth": 3.0e11, "latency": 1e-6, "efficiency": 1.0},
        "nic": {"bandwidth": 2.5e10, "latency": 1e-6, "per_node": gpn, "efficiency": 1.0},
        "pcie": None,
        "topology": topology or {"kind": "fat_tree"},
    }
    out.update(over)
    return out


def chain(n_links: int, bandwidth=1e9, latency=1e-6) -> dict:
    """A custom cluster: gpu0 → s0 → … → gpu1 over ``n_links`` links."""
    names = ["gpu0"] + [f"s{i}" for i in range(n_links - 1)] + ["gpu1"]
    lat = latency if isinstance(latency, list) else [latency] * n_links
    return cluster(
        1,
        2,
        {
            "kind": "custom",
            "nodes": [{"name": n, "kind": "switch"} for n in names[1:-1]],
            "links": [
                {"src": a, "dst": b, "bandwidth": bandwidth, "latency": lat[i]}
                for i, (a, b) in enumerate(pairwise(names))
            ],
        },
    )


EVERY_KIND = {
    "single_node": cluster(1, 8, {"kind": "single_node"}),
    "fat_tree": cluster(4, 8, {"kind": "fat_tree", "nodes_per_leaf": 2}),
    "leaf_spine": cluster(4, 4, {"kind": "leaf_spine", "spines": 2, "oversubscription": 2}),
    "ring": cluster(2, 4, {"kind": "ring"}),
    "torus_2d": cluster(3, 4, {"kind": "torus_2d"}),
    "star": cluster(3, 2, {"kind": "star", "uplink": "1 Gbit/s", "downlink": "10 Gbit/s"}),
    "wan": cluster(
        4,
        8,
        {
            "kind": "wan",
            "bandwidth": "1 Gbit/s",
            "latency": "30 ms",
            "sites": [{"nodes": 2, "topology": {"kind": "fat_tree"}}, {"nodes": 2}],
        },
    ),
    "custom": chain(3),
}


@pytest.mark.parametrize("topology", TOPOLOGIES.values(), ids=lambda t: t.name)
def test_every_topology_refuses_an_unknown_option_at_load(topology):
    # metadata only: any registered topology, its options model and its one-line description
    assert topology.description and "\n" not in topology.description
    raw = {"nodes": 2, "gpus_per_node": 8, "topology": {"kind": topology.name, "spinez": 2}}
    with pytest.raises(ScenarioError) as info:
        load_scenario(
            {
                "cluster": raw,
                "model": {"kind": "synthetic", "layers": 2, "forward": 1e-3, "backward": 2e-3},
                "training": {"global_batch": 16, "micro_batch": 1},
            }
        )
    accepted = ", ".join(topology.options.model_fields)
    assert info.value.field == "cluster.topology.spinez"
    assert (
        str(info.value)
        == f"cluster.topology.spinez: 2 is invalid; unknown option; {topology.name} accepts: {accepted}"
    )


@pytest.mark.parametrize("kind", sorted(EVERY_KIND))
def test_graph_shape(kind):
    spec = EVERY_KIND[kind]
    g = build_topology(spec)
    assert isinstance(g, nx.DiGraph)
    n_gpus = spec["nodes"] * spec["gpus_per_node"]
    gpus = [n for n, k in g.nodes(data="kind") if k == "gpu"]
    assert sorted(gpus) == sorted(f"gpu{i}" for i in range(n_gpus))
    assert all(k in NODE_KINDS for _, k in g.nodes(data="kind"))
    for i in range(n_gpus):
        assert g.nodes[f"gpu{i}"]["host"] == i // spec["gpus_per_node"]
    for u, v, d in g.edges(data=True):
        assert d["bandwidth"] > 0 and d["latency"] >= 0
        assert g.has_edge(v, u), f"{u}->{v} has no reverse"
    # every GPU reaches every other one
    assert all(nx.has_path(g, "gpu0", x) and nx.has_path(g, x, "gpu0") for x in gpus)


def test_nvswitch_node_edges_carry_intra_bandwidth_times_efficiency():
    spec = cluster(1, 4, {"kind": "single_node"})
    spec["intra_node"]["efficiency"] = 0.8
    g = build_topology(spec)
    for i in range(4):
        e = g.edges[f"gpu{i}", "nvswitch0"]
        assert e["bandwidth"] == pytest.approx(3.0e11 * 0.8, rel=1e-15)
        assert e["latency"] * 2 == pytest.approx(1e-6)  # GPU→GPU through the switch = intra_node.latency


def test_pcie_intra_node_uses_a_pcie_switch():
    spec = cluster(1, 4, {"kind": "single_node"})
    spec["intra_node"]["kind"] = "pcie"
    g = build_topology(spec)
    assert g.nodes["pcie0"]["kind"] == "switch" and g.edges["gpu0", "pcie0"]["kind"] == "pcie"


def test_gpu_nic_link_is_pcie_when_configured_else_a_free_wire():
    g = build_topology(cluster(2, 4))
    assert is_wire(g.edges["gpu0", "node0.nic0"])
    g = build_topology(cluster(2, 4, pcie={"bandwidth": "32 GB/s", "latency": "0.5 us"}))
    e = g.edges["gpu0", "node0.nic0"]
    assert (e["bandwidth"], e["latency"], e["kind"]) == (32e9, 0.5e-6, "pcie")


def test_fewer_nics_than_gpus_are_shared_evenly():
    g = build_topology(cluster(2, 8, nic={"bandwidth": 2.5e10, "latency": 1e-6, "per_node": 2}))
    users = {k: {u for u in g.predecessors(f"node1.nic{k}") if u.startswith("gpu")} for k in range(2)}
    assert users == {0: {f"gpu{i}" for i in range(8, 12)}, 1: {f"gpu{i}" for i in range(12, 16)}}


@given(
    oversub=st.sampled_from([1, 1.5, 2, 3, 4]),
    spines=st.integers(1, 6),
    per_leaf=st.integers(1, 3),
    per_node=st.sampled_from([1, 2, 4]),
)
@settings(max_examples=25, deadline=None)
def test_leaf_uplink_capacity_is_downlink_over_oversubscription(oversub, spines, per_leaf, per_node):
    spec = cluster(
        per_leaf * 2,
        4,
        {"kind": "fat_tree", "oversubscription": oversub, "spines": spines, "nodes_per_leaf": per_leaf},
    )
    spec["nic"]["per_node"] = per_node
    g = build_topology(spec)
    for leaf in ("leaf0", "leaf1"):
        down = sum(d["bandwidth"] for _, v, d in g.out_edges(leaf, data=True) if g.nodes[v]["kind"] == "nic")
        up = sum(d["bandwidth"] for _, v, d in g.out_edges(leaf, data=True) if v.startswith("spine"))
        assert down == pytest.approx(per_leaf * per_node * 2.5e10, rel=1e-12)
        assert up == pytest.approx(down / oversub, rel=1e-12)


def test_ring_links_same_host_at_nvlink_speed_and_cross_host_at_nic_speed():
    g = build_topology(cluster(2, 4, {"kind": "ring"}))
    assert g.edges["gpu0", "gpu1"]["bandwidth"] == 3.0e11
    assert g.edges["gpu3", "gpu4"]["bandwidth"] == 2.5e10
    assert g.edges["gpu7", "gpu0"]["bandwidth"] == 2.5e10
    assert all(g.out_degree(f"gpu{i}") == 2 for i in range(8))


@pytest.mark.parametrize(("rows", "cols"), [(3, 4), (4, 4), (2, 5), (1, 6)])
def test_torus_degree(rows, cols):
    g = build_topology(
        cluster(1, rows * cols, {"kind": "torus_2d", "rows": rows, "cols": cols, "bandwidth": "50 GB/s"})
    )
    neighbours = (min(2, rows - 1) if rows > 1 else 0) + (min(2, cols - 1) if cols > 1 else 0)
    assert all(g.out_degree(f"gpu{i}") == neighbours for i in range(rows * cols))
    assert all(d["bandwidth"] == 50e9 for _, _, d in g.edges(data=True))


def test_star_is_asymmetric_around_a_server_node():
    g = build_topology(EVERY_KIND["star"])
    assert g.nodes["server"]["kind"] == "server"
    assert g.edges["node2.nic0", "server"]["bandwidth"] == 1e9 / 8
    assert g.edges["server", "node2.nic0"]["bandwidth"] == 10e9 / 8


def test_wan_numbers_gpus_and_hosts_across_sites_and_parses_long_haul_units():
    g = build_topology(EVERY_KIND["wan"])
    assert g.nodes["gpu16"]["host"] == 2 and g.nodes["gpu16"]["site"] == 1
    e = g.edges["site0.gw", "site1.gw"]
    assert (e["bandwidth"], e["latency"], e["kind"]) == (1.25e8, 0.03, "wan")
    assert "site0.spine0" in g and "site1.leaf0" in g


def test_auto_means_single_node_or_fat_tree():
    assert "leaf0" not in build_topology(cluster(1, 8, {"kind": "auto"}))
    assert "leaf0" in build_topology(cluster(2, 8, {"kind": "auto"}))


# --- errors, message by message -------------------------------------------------------


def _error(spec) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        build_topology(spec)
    return info.value


def test_unknown_kind():
    err = _error(cluster(2, 8, {"kind": "hypercube"}))
    assert err.field == "cluster.topology.kind"
    assert str(err) == f"cluster.topology.kind: 'hypercube' is invalid; known: auto, {', '.join(TOPOLOGIES)}"


def test_multi_node_single_node():
    err = _error(cluster(2, 8, {"kind": "single_node"}))
    assert err.field == "cluster.topology.kind" and "a cluster of 2 nodes needs a multi-node topology" in str(
        err
    )


def test_link_to_missing_node():
    spec = chain(3)
    spec["topology"]["links"][2]["dst"] = "gpu9"
    err = _error(spec)
    assert err.field == "cluster.topology.links[2].dst"
    assert str(err) == (
        "cluster.topology.links[2].dst: 'gpu9' is invalid; a GPU (gpu0, gpu1, …) or a node listed in nodes"
    )


@pytest.mark.parametrize("bad", [0, -1e9, "0 GB/s"])
def test_zero_or_negative_bandwidth_in_custom_link(bad):
    spec = chain(3)
    spec["topology"]["links"][1]["bandwidth"] = bad
    err = _error(spec)
    assert err.field == "cluster.topology.links[1].bandwidth"
    assert "a bandwidth must be positive and finite" in str(err)


def test_a_link_item_is_typed_where_it_is_listed():
    spec = chain(3)
    spec["topology"]["links"][1]["colour"] = "red"
    err = _error(spec)
    assert err.field == "cluster.topology.links[1].colour" and err.value == "red"
    assert err.expected.endswith("accepts: src, dst, bandwidth, latency, bidirectional")  # the link's own
    del spec["topology"]["links"][1]["colour"], spec["topology"]["links"][1]["bandwidth"]
    err = _error(spec)
    assert err.field == "cluster.topology.links[1].bandwidth" and err.expected.startswith("required")
    sites = {"kind": "wan", "bandwidth": "1 Gbit/s", "sites": [{"nodes": 1}, {"nodes": 1}]}
    err = _error(cluster(2, 8, {**sites, "links": [{"src": 0, "dst": 1, "latency": "soon"}]}))
    assert err.field == "cluster.topology.links[0].latency" and "1.5 ms" in err.expected


def test_quantity_options_reach_the_builder_parsed():
    checked = 0
    for kind, topology in TOPOLOGIES.items():
        for name in topology.options.model_fields:
            written, meant = ("2 us", 2e-6) if "latency" in name else ("8 Gbit/s", 1e9)
            if "bandwidth" in name or "latency" in name or name in ("uplink", "downlink"):
                opts = topology.options.model_validate({"kind": kind, name: written})
                assert getattr(opts, name) == meant, (kind, name)
                checked += 1
    assert checked >= 5
    g = build_topology(cluster(2, 8, {"kind": "star", "uplink": "8 Gbit/s", "latency": "3 us"}))
    uplinks = {data["bandwidth"] for a, b, data in g.edges(data=True) if b == "server"}
    assert uplinks == {1e9}
    assert {data["latency"] for a, b, data in g.edges(data=True) if b == "server"} == {3e-6}


def test_zero_nic_bandwidth():
    spec = cluster(2, 8)
    spec["nic"]["bandwidth"] = 0.0
    err = _error(spec)
    assert err.field == "cluster.nic.bandwidth" and "positive" in str(err)


def test_bad_unit_string_names_the_field():
    err = _error(cluster(2, 8, {"kind": "wan", "bandwidth": "fast", "sites": [{"nodes": 1}, {"nodes": 1}]}))
    assert err.field == "cluster.topology.bandwidth" and "200 Gbit/s" in str(err)


def test_disconnected_gpu():
    spec = chain(2)
    spec["gpus_per_node"] = 3  # gpu2 exists but no link touches it
    err = _error(spec)
    assert err.field == "cluster.topology.links" and err.value == "gpu2"
    assert "gpu2 is cut off from gpu0" in str(err)


def test_one_way_link_leaves_gpu_unreachable():
    spec = chain(1)
    spec["topology"]["links"][0]["bidirectional"] = False
    err = _error(spec)
    assert err.value == "gpu1" and "cut off" in str(err)


def test_failed_link_on_a_graph_left_without_links_is_named():
    spec = chain(1)  # gpu0 – gpu1: one cable, gone after the first entry
    spec["failed_links"] = [["gpu0", "gpu1"], ["gpu0", "gpu1"]]
    err = _error(spec)
    assert err.field == "cluster.failed_links[1]" and err.value == ["gpu0", "gpu1"]
    assert str(err).endswith("no link joins these topology nodes; the topology has no links left")


def test_oversubscription_below_one():
    err = _error(cluster(4, 8, {"kind": "fat_tree", "oversubscription": 0.5}))
    assert err.field == "cluster.topology.oversubscription" and "≥ 1" in str(err)


def test_unknown_topology_field_is_not_ignored():
    err = _error(cluster(4, 8, {"kind": "fat_tree", "oversubsription": 2}))
    assert err.field == "cluster.topology.oversubsription" and "accepts: kind, nodes_per_leaf" in str(err)


def test_wan_site_errors_carry_the_site_path():
    err = _error(
        cluster(
            2,
            8,
            {
                "kind": "wan",
                "bandwidth": 1e8,
                "sites": [{"nodes": 1}, {"nodes": 1, "topology": {"kind": "mesh"}}],
            },
        )
    )
    assert err.field == "cluster.topology.sites[1].topology.kind"


def test_wan_gpu_count_must_match_cluster():
    err = _error(cluster(3, 8, {"kind": "wan", "bandwidth": 1e8, "sites": [{"nodes": 1}, {"nodes": 1}]}))
    assert err.field == "cluster.nodes" and "16 GPUs" in str(err)


def test_torus_shape_must_cover_all_gpus():
    err = _error(cluster(1, 12, {"kind": "torus_2d", "rows": 5, "cols": 2}))
    assert err.field == "cluster.topology.rows" and "must equal the GPU count 12" in str(err)


def test_infinite_or_nan_quantities_are_rejected():
    spec = chain(1)
    spec["topology"]["links"][0]["latency"] = math.nan
    assert _error(spec).field == "cluster.topology.links[0].latency"


def test_a_topology_typo_is_refused_even_where_no_topology_is_built():
    # network: direct builds no topology graph, so only the load-time check can see the typo
    raw = {
        "cluster": {"nodes": 2, "gpus_per_node": 8, "topology": {"kind": "fat_tree", "spinez": 2}},
        "model": {"kind": "synthetic", "layers": 2, "forward": 1e-3, "backward": 2e-3},
        "training": {"global_batch": 16, "micro_batch": 1},
        "simulation": {"network": "direct"},
    }
    with pytest.raises(ScenarioError) as info:
        load_scenario(raw)
    assert str(info.value) == (
        "cluster.topology.spinez: 2 is invalid; unknown option; "
        "fat_tree accepts: kind, nodes_per_leaf, spines, oversubscription, latency"
    )
    raw["cluster"]["topology"] = {"kind": "fat_tree", "spines": 2}
    assert load_scenario(raw).cluster.topology == {"kind": "fat_tree", "spines": 2}


def test_a_links_two_directions_hold_separate_attributes():
    """Changing one direction of a link (a fabric derating it) leaves the other as built."""
    from clustersim.topology.graph import add_link

    g = nx.DiGraph()
    add_link(g, "a", "b", 2.0e9, 1e-6, "nic")
    g["a"]["b"]["bandwidth"] = 1.0e9
    assert g["b"]["a"] == {"bandwidth": 2.0e9, "latency": 1e-6, "kind": "nic"}


def _through_networkx(monkeypatch):
    """The builders' node and link helpers replaced by networkx's own calls (what they
    write directly, clustersim/topology/graph.py)."""
    from clustersim.topology import graph, servers

    def add_link(g, a, b, bandwidth, latency, kind):
        attrs = {"bandwidth": bandwidth, "latency": latency, "kind": kind}
        g.add_edges_from(((a, b, attrs), (b, a, attrs)))

    def add_node(g, name, **attrs):
        g.add_node(name, **attrs)

    for module in (
        graph,
        servers,
        *(__import__(t.factory.__module__, fromlist=["_"]) for t in TOPOLOGIES.values()),
    ):
        for name, helper in (("add_link", add_link), ("add_node", add_node)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, helper)


def _everything(g: nx.DiGraph) -> tuple:
    """All a DiGraph holds, in its order: its fields, its nodes' attributes and each node's
    successors and predecessors with their edge attributes."""
    return (
        sorted(vars(g)),
        [(n, list(d.items())) for n, d in g._node.items()],
        *(
            [(n, [(v, list(d.items())) for v, d in nbrs.items()]) for n, nbrs in adj.items()]
            for adj in (g._succ, g._pred)
        ),
    )


CLOS = cluster(
    6,
    4,
    {"kind": "fat_tree", "nodes_per_leaf": 4},
    nic={"bandwidth": 2.5e10, "latency": 1e-6, "per_node": 2, "efficiency": 1.0},
)


@pytest.mark.parametrize("kind", [*sorted(EVERY_KIND), "uneven_clos", "pcie", "rail"])
def test_the_builders_make_the_graph_networkx_calls_make(kind, monkeypatch):
    spec = {
        "uneven_clos": CLOS,
        "pcie": cluster(2, 4, pcie={"bandwidth": 3.2e10, "latency": 1e-7}),
        "rail": cluster(3, 4, {"kind": "rail", "spines": 2}),
    }.get(kind) or EVERY_KIND[kind]
    direct = build_topology(spec)
    len(direct)  # a fat tree is written on first use (topology/lazy.py): now, and
    with monkeypatch.context() as m:
        _through_networkx(m)
        public = build_topology(spec)
        len(public)  # here by networkx's calls
    assert _everything(direct) == _everything(public)
    assert direct.graph == public.graph
    for u, v, data in direct.edges(data=True):  # one dict per direction, seen from both ends
        assert direct._pred[v][u] is data and (not direct.has_edge(v, u) or direct._succ[v][u] is not data)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("node"),
                st.sampled_from("abcd"),
                st.dictionaries(st.sampled_from(["kind", "host"]), st.integers(0, 3)),
            ),
            st.tuples(
                st.just("link"), st.sampled_from("abcd"), st.sampled_from("abcd"), st.sampled_from([1.0, 2.0])
            ),
        ),
        max_size=12,
    )
)
def test_node_and_link_helpers_write_what_networkx_writes(calls):
    """Any sequence of them, nodes added by a link, links added again and self-links included."""
    from clustersim.topology.graph import add_link, add_node

    direct, public = nx.DiGraph(), nx.DiGraph()
    for call in calls:
        if call[0] == "node":
            add_node(direct, call[1], **call[2])
            public.add_node(call[1], **call[2])
        else:
            _, a, b, bw = call
            add_link(direct, a, b, bw, 1e-6, "nic")
            attrs = {"bandwidth": bw, "latency": 1e-6, "kind": "nic"}
            public.add_edges_from(((a, b, attrs), (b, a, attrs)))
    assert _everything(direct) == _everything(public)
    for u, v, data in direct.edges(data=True):
        assert direct._pred[v][u] is data and (u == v or direct._succ[v][u] is not data)


@pytest.mark.parametrize("value", ["4", True, 4.0])
def test_an_option_of_the_wrong_type_is_refused_not_coerced(value):
    # the builder receives the options typed (strict): "4", true or 4.0 is no count of servers
    err = _error(cluster(4, 8, {"kind": "fat_tree", "nodes_per_leaf": value}))
    assert err.field == "cluster.topology.nodes_per_leaf" and err.value == value
    assert "fat_tree accepts: kind, nodes_per_leaf" in str(err)
