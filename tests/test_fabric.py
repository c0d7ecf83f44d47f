"""Packet and analytical fabrics: closed forms on idle routes, sharing, conservation."""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import pairwise

import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from clustersim.errors import ScenarioError
from clustersim.network import (
    DEFAULT_CHUNK_SIZE,
    NETWORK_MODELS,
    AnalyticalFabric,
    DirectFabric,
    FabricOptions,
    PacketFabric,
    build_fabric,
)
from clustersim.record import Recorder
from clustersim.topology import build_topology, is_wire

from .test_topology import chain, cluster

MiB = 1 << 20


def run_flows(graph, flows, kind="packet", chunk_size=None):
    """Start ``flows`` = [(src, dst, nbytes[, start_s])]; return (finish times, spans, fabric)."""
    env, rec = simpy.Environment(), Recorder()
    fabric = build_fabric(kind, env, rec, graph, FabricOptions(chunk_size))
    finish = [None] * len(flows)

    def start(i, src, dst, nbytes, at):
        yield env.timeout(at)
        yield fabric.transfer(src, dst, nbytes, label=f"f{i}")
        finish[i] = env.now

    for i, f in enumerate(flows):
        env.process(start(i, f[0], f[1], f[2], f[3] if len(f) > 3 else 0.0))
    env.run()
    return finish, rec.spans, fabric


def star_of(n_senders: int, bandwidth=1e9, latency=1e-6):
    """gpu0..gpu{n-1} → sw → gpu{n}: every sender's link is private, sw→gpu{n} is shared."""
    n = n_senders
    return build_topology(
        cluster(
            1,
            n + 1,
            {
                "kind": "custom",
                "nodes": [{"name": "sw", "kind": "switch"}],
                "links": [
                    {"src": f"gpu{i}", "dst": "sw", "bandwidth": bandwidth, "latency": latency}
                    for i in range(n + 1)
                ],
            },
        )
    )


# --- idle network closed forms ---------------------------------------------------------


@given(
    hops=st.integers(1, 5),
    nbytes=st.integers(1, 40 * MiB),
    chunk=st.integers(4096, 4 * MiB),
    bw=st.floats(1e8, 1e12),
    lat=st.lists(st.floats(0, 1e-3), min_size=5, max_size=5),
)
@example(hops=2, nbytes=1844991, chunk=4100, bw=183177592071.0, lat=[0.00084, 0, 0, 0, 0])
@settings(max_examples=60, deadline=None)
def test_idle_route_time_is_the_pipeline_formula(hops, nbytes, chunk, bw, lat):
    """S/B + (h − 1)·c/B + Σ l_i with c = min(chunk, S), the largest chunk."""
    lat = lat[:hops]
    g = build_topology(chain(hops, bw, lat))
    (t,), _, _ = run_flows(g, [("gpu0", "gpu1", nbytes)], chunk_size=chunk)
    expected = nbytes / bw + (hops - 1) * min(chunk, nbytes) / bw + sum(lat)
    assert t == pytest.approx(expected, rel=1e-9)
    (ta,), _, _ = run_flows(g, [("gpu0", "gpu1", nbytes)], kind="analytical")
    assert ta == pytest.approx(nbytes / bw + sum(lat), rel=1e-12)
    # the two models differ by the store-and-forward pipeline term only
    # float noise: t is a sum of one step per chunk and hop, each rounding by up to ulp(t)
    steps = -(-nbytes // min(chunk, nbytes)) + hops
    assert t - ta == pytest.approx(
        (hops - 1) * min(chunk, nbytes) / bw, rel=1e-6, abs=max(1e-12 * t, 4 * steps * math.ulp(t))
    )
    if hops <= 2:  # (with the same float noise: a 4 kB chunk's time is below it at 0.8 ms)
        assert abs(t - ta) <= chunk / bw * (1 + 1e-9) + 4 * steps * math.ulp(t)


def test_one_hop_matches_direct_fabric():
    g = build_topology(chain(1, 2.5e10, 3e-6))
    (t,), _, _ = run_flows(g, [("gpu0", "gpu1", 123 * MiB + 7)])
    env = simpy.Environment()
    ev = DirectFabric(env, Recorder(), 2.5e10, 3e-6).transfer("gpu0", "gpu1", 123 * MiB + 7)
    env.run(ev)
    assert t == pytest.approx(env.now, rel=1e-12)


def test_default_chunk_in_a_fat_tree_route():
    """gpu→nic (PCIe) → leaf → spine → leaf → nic → gpu: 6 links of differing speed."""
    spec = cluster(
        2,
        2,
        {"kind": "fat_tree", "nodes_per_leaf": 1, "spines": 1},
        pcie={"bandwidth": 2.5e10, "latency": 0.0},
    )
    g = build_topology(spec)
    (t,), _, fabric = run_flows(g, [("gpu0", "gpu2", 64 * MiB)])
    links = fabric.route("gpu0", "gpu2")
    assert len(links) == 6 and fabric.chunk_size == DEFAULT_CHUNK_SIZE == MiB
    # every link runs at 25 GB/s except leaf↔spine (2 NICs × 25 GB/s / 1 spine = 50 GB/s),
    # where a 1 MiB chunk never waits: the bottleneck links pipeline as an equal-speed chain.
    c, b = MiB, 2.5e10
    expected = 64 * MiB / b + 3 * c / b + 2 * c / (2 * b) + sum(link.latency for link in links)
    assert t == pytest.approx(expected, rel=1e-9)


def test_zero_bytes_cost_latency_and_self_transfer_is_free():
    g = build_topology(chain(3, 1e9, 2e-6))
    (t0, t1), spans, _ = run_flows(g, [("gpu0", "gpu1", 0), ("gpu1", "gpu1", 10 * MiB)])
    assert t0 == pytest.approx(6e-6, rel=1e-12) and t1 == 0.0 and spans == []


# --- sharing -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5])
def test_flows_sharing_a_bottleneck_split_its_bandwidth(n):
    """N senders into one receiver link: the last byte lands at N·S/B (+ one chunk)."""
    bw, lat, s, c = 1e9, 1e-6, 16 * MiB, MiB
    finish, _, _ = run_flows(star_of(n, bw, lat), [(f"gpu{i}", f"gpu{n}", s) for i in range(n)])
    ideal = n * s / bw + 2 * lat
    for t in finish:  # FIFO interleaving: every flow finishes within one chunk of N·S/B
        assert ideal - (n - 1) * c / bw - 1e-12 <= t <= ideal + c / bw + 1e-12
    assert max(finish) == pytest.approx(ideal + c / bw, rel=1e-9)


def test_disjoint_paths_do_not_slow_each_other():
    g = build_topology(cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2}))
    flows = [
        ("gpu0", "gpu1", 32 * MiB),
        ("gpu4", "gpu5", 32 * MiB),
        ("gpu2", "gpu6", 32 * MiB),
        ("gpu3", "gpu7", 32 * MiB),
    ]
    together, _, _ = run_flows(g, flows)
    alone = [run_flows(g, [f])[0][0] for f in flows]
    assert together == alone


def test_oversubscription_slows_cross_leaf_traffic_twofold_and_leaves_intra_leaf_alone():
    s, n = 4 * MiB, 16

    def all_pairs(oversub, cross):
        g = build_topology(
            cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 4, "oversubscription": oversub})
        )
        flows = [
            (f"gpu{a}", f"gpu{b}", s)
            for a in range(n)
            for b in range(n)
            if a != b and (a // 8 != b // 8 if cross else (a // 8 == b // 8 and a // 4 != b // 4))
        ]
        return max(run_flows(g, flows, chunk_size=256 * 1024)[0])

    t1, t2 = all_pairs(1, True), all_pairs(2, True)
    # lower bounds: at 1:1 every NIC must inject 8·S; at 2:1 each leaf uplink (B) carries 16·S
    b = 2.5e10
    assert t1 >= 8 * s / b and t2 >= 16 * s / b
    # pipeline fill/drain is a few chunks out of 64+ chunk-times of load
    assert t2 / t1 == pytest.approx(2.0, rel=0.1)
    assert all_pairs(1, False) == all_pairs(2, False)


# --- invariants --------------------------------------------------------------------------

flows_strategy = st.lists(
    st.tuples(st.integers(0, 15), st.integers(0, 15), st.integers(0, 3 * MiB), st.floats(0, 2e-4)),
    min_size=1,
    max_size=12,
)


@given(flows=flows_strategy, oversub=st.sampled_from([1, 2, 4]), chunk=st.sampled_from([64 * 1024, MiB]))
@settings(max_examples=40, deadline=None)
def test_bytes_conserved_and_links_never_overbooked(flows, oversub, chunk):
    g = build_topology(
        cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 2, "oversubscription": oversub})
    )
    flows = [(f"gpu{a}", f"gpu{b}", s, t) for a, b, s, t in flows]
    finish, spans, fabric = run_flows(g, flows, chunk_size=chunk)
    assert all(t is not None for t in finish)
    routed = defaultdict(int)
    for src, dst, nbytes, _ in flows:
        for link in fabric.route(src, dst):
            routed[link.name] += nbytes
    by_link = defaultdict(list)
    for span in spans:
        assert span[1] == "link" and span[2] == "link"
        by_link[span[0]].append(span)
    assert {k: sum(s[8] for s in v) for k, v in by_link.items()} == {k: v for k, v in routed.items() if v}
    for name, link_spans in by_link.items():
        u, v = name.split("->")
        bw = g.edges[u, v]["bandwidth"]
        assert not is_wire(g.edges[u, v])
        link_spans.sort(key=lambda s: s[6])
        for a, b in pairwise(link_spans):
            assert b[6] >= a[7]  # one chunk at a time
        for s in link_spans:  # never more than 100% busy: bytes ≤ bandwidth × duration
            # a few-byte chunk lasts ~1e-11 s, where the rounding of start and end (an ulp
            # of the absolute time) is a relative error of the duration above 1e-9
            assert s[8] / bw <= (s[7] - s[6]) * (1 + 1e-9) + 2 * math.ulp(s[7])


def test_back_to_back_chunks_of_one_flow_make_one_span():
    g = build_topology(chain(3, 1e9, 1e-6))
    _, spans, _ = run_flows(g, [("gpu0", "gpu1", 10 * MiB)], chunk_size=MiB)
    assert len(spans) == 3 and all(s[8] == 10 * MiB and s[3] == "f0" for s in spans)


def test_same_inputs_same_spans_and_labels_do_not_change_timing():
    g = build_topology(cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 2}))
    flows = [(f"gpu{i}", f"gpu{(i * 7 + 3) % 16}", (i + 1) * MiB // 3) for i in range(16)]
    first, spans1, _ = run_flows(g, flows)
    again, spans2, _ = run_flows(g, flows)
    assert first == again and spans1 == spans2


# --- factory -----------------------------------------------------------------------------


def test_factory_builds_each_model_and_rejects_unknown_ones():
    g = build_topology(chain(2))
    env, rec = simpy.Environment(), Recorder()
    assert isinstance(build_fabric("packet", env, rec, g, FabricOptions(4096)), PacketFabric)
    assert build_fabric("packet", env, rec, g, FabricOptions(4096)).chunk_size == 4096
    assert isinstance(build_fabric("analytical", env, rec, g), AnalyticalFabric)
    assert isinstance(build_fabric(None, env, rec, g), PacketFabric)
    with pytest.raises(ScenarioError) as info:
        build_fabric("fluid", env, rec, g)
    assert (
        str(info.value)
        == f"simulation.network: 'fluid' is invalid; known network models: {', '.join(NETWORK_MODELS)}"
    )
    with pytest.raises(ScenarioError) as info:
        build_fabric("packet", env, rec, g, FabricOptions(0))
    assert info.value.field == "simulation.chunk_size"


@pytest.mark.parametrize("hops,latency", [(1, 1e-6), (3, 0.0), (3, 2e-6)])
def test_finished_flows_are_freed_without_the_collector(hops, latency):
    # a flow and its injector, and a link and the flow of its open span, refer to each
    # other until the flow's last chunk is in; after that only reference counting is
    # needed to free it (the quickstart left 13,528 flows, each with its injector and done
    # event, for the collector's first pass after the run)
    import gc

    from clustersim.network.packet import _Flow

    g = build_topology(chain(hops, 1e9, latency))
    enabled = gc.isenabled()
    gc.disable()
    try:
        _, _, fabric = run_flows(g, [("gpu0", "gpu1", 5 * MiB, 0.01 * i) for i in range(6)], chunk_size=MiB)
        # (a link forgets the flow of its last span once that flow's last chunk crossed it)
        assert not [o for o in gc.get_objects() if type(o) is _Flow and o.shared is fabric.shared]
    finally:
        if enabled:
            gc.enable()
