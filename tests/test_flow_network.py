"""The flow-level network model: max-min fair sharing, closed forms, agreement with packet."""

from __future__ import annotations

from collections import defaultdict

import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.network import build_fabric
from clustersim.record import Recorder
from clustersim.topology import build_topology

from .test_fabric import flows_strategy, run_flows, star_of
from .test_topology import chain, cluster

MiB = 1 << 20
ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def parking_lot(l1: float, l2: float, lat: float):
    """Flow A crosses s0→s1 (L1) and s1→s2 (L2); B crosses L1 only, C L2 only. Access
    links are 1000× faster, so only L1 and L2 bind."""
    fast = 1e12
    links = [
        ("gpu0", "s0", fast),
        ("s0", "s1", l1),
        ("s1", "s2", l2),
        ("s2", "gpu1", fast),
        ("gpu2", "s0", fast),
        ("s1", "gpu3", fast),
        ("gpu4", "s1", fast),
        ("s2", "gpu5", fast),
    ]
    spec = {
        "kind": "custom",
        "nodes": [{"name": f"s{i}", "kind": "switch"} for i in range(3)],
        "links": [{"src": a, "dst": b, "bandwidth": bw, "latency": lat} for a, b, bw in links],
    }
    return build_topology(cluster(1, 6, spec))


@given(
    hops=st.integers(1, 5),
    nbytes=st.integers(1, 40 * MiB),
    bw=st.floats(1e8, 1e12),
    lat=st.lists(st.floats(0, 1e-3), min_size=5, max_size=5),
)
@settings(max_examples=40, deadline=None)
def test_idle_route_equals_analytical(hops, nbytes, bw, lat):
    """Alone on its route a flow takes Σ latency + S / bottleneck — the analytical time, exactly."""
    g = build_topology(chain(hops, bw, lat[:hops]))
    (tf,), spans, _ = run_flows(g, [("gpu0", "gpu1", nbytes)], kind="flow")
    (ta,), _, _ = run_flows(g, [("gpu0", "gpu1", nbytes)], kind="analytical")
    assert tf == ta and spans == []


def test_fat_tree_idle_routes_equal_analytical():
    g = build_topology(cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 2}))
    for dst in range(1, 16):
        flow = [("gpu0", f"gpu{dst}", 3 * MiB + dst)]
        assert run_flows(g, flow, kind="flow")[0] == run_flows(g, flow, kind="analytical")[0]


@pytest.mark.parametrize("n", [2, 3, 5])
def test_flows_on_one_link_share_it_equally(n):
    """N equal flows into one receiver link each get B/N: all land at N·S/B + 2ℓ."""
    bw, lat, s = 1e9, 1e-6, 16 * MiB
    finish, _, _ = run_flows(star_of(n, bw, lat), [(f"gpu{i}", f"gpu{n}", s) for i in range(n)], kind="flow")
    assert finish == pytest.approx([s / (bw / n) + 2 * lat] * n, rel=1e-12)


def test_parking_lot_is_max_min_fair():
    """L1 = 1 GB/s carries A and B, L2 = 2 GB/s carries A and C. Sizes A = S, B = S/2, C = 3S.
    Until B ends (t = S/B1): A = B = 0.5 GB/s (L1 binds), C = 1.5 GB/s (L2's rest). Then L1
    and L2 both offer A 1 GB/s: A's last S/2 end at 1.5·S/B1, C carries S/2 more meanwhile and
    its last S alone at 2 GB/s: C ends at 2·S/B1."""
    b1, lat, s = 1e9, 2e-6, 8 * MiB
    g = parking_lot(b1, 2 * b1, lat)
    flows = [("gpu0", "gpu1", s), ("gpu2", "gpu3", s // 2), ("gpu4", "gpu5", 3 * s)]
    (ta, tb, tc), _, _ = run_flows(g, flows, kind="flow")
    assert tb == pytest.approx(s / b1 + 3 * lat, rel=1e-12)
    assert ta == pytest.approx(1.5 * s / b1 + 4 * lat, rel=1e-12)
    assert tc == pytest.approx(2 * s / b1 + 3 * lat, rel=1e-12)


def _rates_after_start(graph, flows):
    """Start every flow at t = 0 and return the fabric once their rates are allocated."""
    env = simpy.Environment()
    fabric = build_fabric("flow", env, Recorder(), graph)
    for src, dst, nbytes in flows:
        fabric.transfer(src, dst, nbytes)
    env.run(until=1e-15)
    return fabric


@given(flows=flows_strategy, oversub=st.sampled_from([1, 2, 4]))
@settings(max_examples=40, deadline=None)
def test_rates_are_max_min_fair_and_never_overbook(flows, oversub):
    """The definition of max-min fairness: no link carries more than its bandwidth, and every
    flow crosses a saturated link on which no flow is faster than it."""
    g = build_topology(
        cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 2, "oversubscription": oversub})
    )
    fabric = _rates_after_start(g, [(f"gpu{a}", f"gpu{b}", s + 1) for a, b, s, _ in flows if a != b])
    load, fastest = defaultdict(float), defaultdict(float)
    for links, rate in fabric.flows():
        for link in links:
            load[link] += rate
            fastest[link] = max(fastest[link], rate)
    for link, total in load.items():
        assert total <= link.bandwidth * (1 + 1e-12)
    for links, rate in fabric.flows():
        assert rate > 0
        assert any(load[x] >= x.bandwidth * (1 - 1e-12) and rate >= fastest[x] * (1 - 1e-12) for x in links)


@given(flows=flows_strategy, oversub=st.sampled_from([1, 2, 4]))
# found by the search: the second flow's wake-up time rounded below its timer's and was
# taken for a superseded one, so the flow never finished
@example(flows=[(0, 4, 461, 0.0), (8, 9, 175422, 0.0)], oversub=1)
@settings(max_examples=30, deadline=None)
def test_no_flow_beats_its_idle_time_and_all_finish(flows, oversub):
    g = build_topology(
        cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 2, "oversubscription": oversub})
    )
    flows = [(f"gpu{a}", f"gpu{b}", s, t) for a, b, s, t in flows]
    finish, _, _ = run_flows(g, flows, kind="flow")
    for f, t in zip(flows, finish, strict=True):
        (alone,), _, _ = run_flows(g, [(f[0], f[1], f[2])], kind="analytical")
        assert t is not None and t - f[3] >= alone * (1 - 1e-12)


def test_oversubscription_doubles_cross_leaf_all_to_all():
    """16 GPUs, every cross-leaf pair sends S: at 1:1 each NIC injects 8·S at B; at 2:1 each
    leaf uplink carries 16·S at B. Fluid sharing makes both bounds exact."""
    s, n, b, lat = 4 * MiB, 16, 2.5e10, 1e-6

    def all_pairs(oversub):
        g = build_topology(
            cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 4, "oversubscription": oversub})
        )
        flows = [(f"gpu{a}", f"gpu{c}", s) for a in range(n) for c in range(n) if a // 8 != c // 8]
        return max(run_flows(g, flows, kind="flow")[0])

    t1, t2 = all_pairs(1), all_pairs(2)
    assert t1 == pytest.approx(8 * s / b, rel=1e-3, abs=10 * lat)
    assert t2 == pytest.approx(16 * s / b, rel=1e-3, abs=10 * lat)


def test_degradation_window_slows_a_flow_exactly():
    """A 1 GB/s link at half speed over [1 ms, 3 ms): 3 MB sent at 0 carry 1 MB by 1 ms,
    1 MB by 3 ms, and the last 1 MB by 4 ms."""
    g = build_topology(chain(1, 1e9, 0.0))
    g.edges["gpu0", "gpu1"]["windows"] = ((1e-3, 3e-3, 0.5),)
    (t,), _, _ = run_flows(g, [("gpu0", "gpu1", 3_000_000)], kind="flow")
    assert t == pytest.approx(4e-3, rel=1e-12)


# Shipped scenarios: flow vs packet iteration time. The flow model has no store-and-forward
# term and shares links at once instead of chunk by chunk in FIFO order, so it differs from
# packet most where many flows queue on a slow shared NIC (PipeDream 15-1 over 10 GbE: +8.6%).
AGREEMENT = [
    ("quickstart.yaml", 0.02),
    ("fusionllm-gpt-1.3b-48gpu-3sites-wan.yaml", 0.02),
    ("pipedream-vgg16-16xV100-10GbE.yaml", 0.05),
    ("pipedream-vgg16-16xV100-10GbE-15-1.yaml", 0.10),
    ("edgepipe-vit-large-4xT4-1GbE.yaml", 0.01),
]


@pytest.mark.parametrize("name,bound", AGREEMENT)
def test_flow_agrees_with_packet_on_shipped_scenarios(name, bound):
    sc = cs.load_scenario(ROOT / "scenarios" / name)
    t = {
        net: cs.simulate(sc.with_overrides({"simulation.network": net}), progress=False).summary[
            "iteration_time_s"
        ]
        for net in ("packet", "flow", "analytical")
    }
    assert abs(t["flow"] - t["packet"]) <= bound * t["packet"]
    # contention only ever adds time — but a collective of negligible bytes, timed by its α-β
    # form on flow, may end up to 1e-3 of its own few µs before its idle schedule does
    # (clustersim/collectives/negligible.py; quickstart: 1.5e-11 of the iteration)
    assert t["flow"] >= t["analytical"] * (1 - 1e-9)


# enough flows, starting at enough moments, that superseded finish entries pile up
many_flows = st.lists(
    st.tuples(
        st.integers(0, 15), st.integers(0, 15), st.integers(0, 3 * MiB), st.sampled_from([0.0, 1e-5, 1e-4])
    ),
    min_size=24,
    max_size=48,
)


@given(flows=many_flows, oversub=st.sampled_from([1, 2, 4]))
@settings(max_examples=20, deadline=None)
def test_finish_entries_one_by_one_or_heapified_agree_exactly(flows, oversub):
    """A large group's finish times go on the heap with one heapify (superseded entries
    dropped), a small group's one by one: every flow lands at the same float either way."""
    from clustersim.network import flow

    g = build_topology(
        cluster(4, 4, {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": 2, "oversubscription": oversub})
    )
    flows = [(f"gpu{a}", f"gpu{b}", s, t) for a, b, s, t in flows]
    finish = {}
    for few in (0, 10**9):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(flow, "_FEW_ENDS", few)
            finish[few] = run_flows(g, flows, kind="flow")[0]
    assert [repr(t) for t in finish[0]] == [repr(t) for t in finish[10**9]]
