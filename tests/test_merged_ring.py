"""A ring across hosts on the flow model timed in closed form while its links are its own, and
split back into its messages when other traffic joins one (collectives/merged_ring.py, issue
38 item 2): every member's finish, the call's end and every other transfer's arrival equal
the message-by-message run's to float rounding, idle or contended, folded twins' orbits or
not, on random small fat trees."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.collectives import api, merged_ring
from clustersim.collectives.algorithm import Tuning
from clustersim.network.flow import FlowFabric
from clustersim.network.orbits import MirroredFabric
from clustersim.network.packet import PacketFabric
from clustersim.record import Recorder
from clustersim.simpy_fast import scheduled_count
from clustersim.topology import build_topology

from .test_topology import cluster

MiB = 1 << 20
#: float rounding of the closed form's sums against the run's step-by-step additions (seen:
#: ≤ 1e-15; a closed form that missed a step, or a split that misplaced a message, is off by
#: a step's share: 1e-3 and more)
RTOL = 1e-9


def _run(merge: bool, case: dict) -> dict:
    """One ring call (and its background traffic) on a fresh flow fabric: member finishes,
    the call's end, the background arrivals, events, and the merged rings made and split."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _run_patched(merge, case, monkeypatch)


def _run_patched(merge: bool, case: dict, monkeypatch) -> dict:
    hosts, gpn = case["hosts"], case["gpn"]
    graph = build_topology(cluster(hosts, gpn, {"kind": "fat_tree", "oversubscription": case["oversub"]}))
    env = simpy.Environment()
    fabric = FlowFabric(env, Recorder(), graph)
    members = [f"gpu{h * gpn}" for h in range(hosts)]
    on = fabric
    if case["twins"]:  # folded: the other local ranks' rings ride as orbits
        on = MirroredFabric(fabric, [[f"gpu{h * gpn + j}" for h in range(hosts)] for j in range(gpn)])
    rings = []
    if merge:
        hold = merged_ring.RingPlan.hold

        def held(plan, *args):
            ring = hold(plan, *args)
            rings.append(ring)
            return ring

        monkeypatch.setattr(merged_ring.RingPlan, "hold", held)
    else:
        monkeypatch.setattr(api.Call, "_merged", lambda self, label: None)
    tuning = Tuning(None, case["latency"], case.get("protocols"))
    call = api.prepare_collective(env, on, case["kind"], members, case["nbytes"], "ring", tuning)
    out = {"bg": [None] * len(case["bg"])}

    def ring():
        yield env.timeout(case["at"])
        out["finish"] = yield from call.run("ring")
        out["end"] = env.now

    def other(i, src, dst, nbytes, at, load):
        yield env.timeout(at)
        if load:
            fabric.load(f"gpu{src}", f"gpu{dst}", nbytes)
            return
        yield fabric.transfer(f"gpu{src}", f"gpu{dst}", nbytes)
        out["bg"][i] = env.now

    env.process(ring())
    for i, flow in enumerate(case["bg"]):
        env.process(other(i, *flow))
    env.run()
    out["events"], out["rings"] = scheduled_count(env), [r for r in rings if r is not None]
    return out


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * abs(b)


def _same(merged: dict, plain: dict) -> None:
    assert _close(merged["end"], plain["end"]), (merged["end"], plain["end"])
    for m, t in plain["finish"].items():
        assert _close(merged["finish"][m], t), (m, merged["finish"][m], t)
    for got, want in zip(merged["bg"], plain["bg"], strict=True):
        assert (got is None) == (want is None) and (got is None or _close(got, want)), (got, want)


@st.composite
def cases(draw, traffic=True):
    hosts, gpn = draw(st.integers(2, 9)), draw(st.sampled_from([1, 2, 4]))
    gpus = hosts * gpn
    flow = st.tuples(
        st.integers(0, gpus - 1),
        st.integers(0, gpus - 1),
        st.sampled_from([1000, MiB, 4 * MiB]),
        st.sampled_from([0.0, 1e-5, 4e-5, 1.5e-4, 6e-4, 3e-3]),
        st.booleans(),  # a load (a folded twin's send: no event of its arrival)
    )
    return {
        "hosts": hosts,
        "gpn": gpn,
        "oversub": draw(st.sampled_from([1, 2, 4])),
        "twins": gpn > 1 and draw(st.booleans()),
        "kind": draw(st.sampled_from(["all_reduce", "reduce_scatter", "all_gather"])),
        "nbytes": draw(st.sampled_from([0, 999, 12345, MiB, 3 * MiB + 7])),
        "latency": draw(st.sampled_from(["overlapped", "nccl"])),
        "at": draw(st.sampled_from([0.0, 2e-5])),
        # a protocol's latency before the engines start (the links are held from the call on)
        "protocols": draw(st.sampled_from([None, {"simple": {"latency": 3e-5, "efficiency": 0.9}}])),
        "bg": [f for f in draw(st.lists(flow, max_size=5 if traffic else 0)) if f[0] != f[1]],
    }


@given(case=cases(traffic=False))
@settings(max_examples=40, deadline=None)
def test_an_idle_ring_in_closed_form_is_the_message_by_message_ring(case):
    merged, plain = _run(True, case), _run(False, case)
    _same(merged, plain)
    assert merged["rings"] and merged["rings"][0].split_at is None  # every such ring merges
    assert merged["events"] <= 6 < plain["events"]


@given(case=cases())
@settings(max_examples=150, deadline=None)
def test_a_contended_ring_splits_where_the_message_by_message_ring_is(case):
    _same(_run(True, case), _run(False, case))


def test_traffic_joining_a_ring_link_mid_way_splits_it_there():
    """A transfer from host 1 to host 2 starting halfway through an all-reduce over 4 hosts
    shares the ring's hop 1 → 2: the ring splits at that moment, and everything lands when it
    does message by message (in flight, in its α and landing messages all present)."""
    case = {
        "hosts": 4,
        "gpn": 1,
        "oversub": 1,
        "twins": False,
        "kind": "all_reduce",
        "nbytes": 8 * MiB,
        "latency": "overlapped",
        "at": 0.0,
        "bg": [],
    }
    idle = _run(True, case)
    for frac in (0.13, 0.5, 0.77):
        case["bg"] = [(1, 2, 2 * MiB, frac * idle["end"], False)]
        merged, plain = _run(True, case), _run(False, case)
        _same(merged, plain)
        (ring,) = merged["rings"]
        assert _close(ring.split_at, frac * idle["end"])
        assert plain["end"] > idle["end"] * (1 + 1e-3)  # the newcomer really slowed the ring


def test_traffic_elsewhere_leaves_it_merged():
    """A transfer inside one host (NVLink) shares no link with the ring: no split."""
    case = {
        "hosts": 3,
        "gpn": 2,
        "oversub": 1,
        "twins": False,
        "kind": "all_reduce",
        "nbytes": 4 * MiB,
        "latency": "overlapped",
        "at": 0.0,
        "bg": [(0, 1, 4 * MiB, 1e-5, False)],
    }
    merged, plain = _run(True, case), _run(False, case)
    _same(merged, plain)
    assert merged["rings"][0].split_at is None and merged["events"] < plain["events"]


def test_refused_where_not_exact_or_not_flow():
    """No closed form for a ring of several channels (two members per host: NVLink and
    network hops), nor on ``packet``; a ring whose links carry a flow when it is prepared runs
    message by message."""
    graph = build_topology(cluster(3, 2))
    env = simpy.Environment()
    flow = FlowFabric(env, Recorder(), graph)
    call = api.prepare_collective(env, flow, "all_reduce", [f"gpu{i}" for i in range(6)], MiB, "ring")
    assert call._merged("x") is None and call.merge is False
    packet = PacketFabric(env, Recorder(), graph)
    call = api.prepare_collective(env, packet, "all_reduce", ["gpu0", "gpu2", "gpu4"], MiB, "ring")
    assert call._merged("x") is None and call.merge is False
    call = api.prepare_collective(env, flow, "all_reduce", ["gpu0", "gpu2", "gpu4"], MiB, "ring")
    flow.transfer("gpu2", "gpu4", MiB)
    assert call._merged("x") is None and call.merge  # planned, but its link 2 → 4 is busy
