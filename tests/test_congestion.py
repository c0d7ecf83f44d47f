"""RoCE congestion control on the packet model (clustersim/network/congestion.py): DCQCN's
rate law in closed form, the two-flow case (work conservation, the queue ECN/DCQCN and PFC
leave), an incast whose victim PFC slows, an all-to-all whose tail moves, and the refusals."""

from __future__ import annotations

import pytest
import simpy

import clustersim as cs
from clustersim.engine.network_setup import congestion_of
from clustersim.errors import ScenarioError
from clustersim.network.congestion import (
    DCQCN_F,
    DCQCN_G,
    DCQCN_RAI,
    DCQCN_TIMER,
    Congestion,
    CongestionFabric,
    ReactionPoint,
)
from clustersim.record import Recorder
from clustersim.scenario.schema import SimulationSpec
from clustersim.topology import build_topology
from tests.conftest import synthetic
from tests.test_nccl_algorithms import one_gpu_per_node

NIC = 12.5e9  # 100 Gbit/s
CHUNK = 16 * 1024


def run_flows(nodes: int, flows: list[tuple[str, str, int]], cc: Congestion):
    """Start every flow at 0; (fabric, {flow index: finish time})."""
    env = simpy.Environment()
    fabric = CongestionFabric(env, Recorder(), build_topology(one_gpu_per_node(nodes, NIC, 1e-6)), cc, CHUNK)
    ends = {}
    for i, (src, dst, nbytes) in enumerate(flows):
        fabric.transfer(src, dst, nbytes).callbacks.append(lambda _e, i=i: ends.__setitem__(i, env.now))
    env.run()
    return fabric, ends


def test_dcqcn_rate_law_closed_form():
    rp = ReactionPoint(NIC)
    rp.cnp(1e-3)  # α = 1 at first: Rc halves, Rt keeps the line rate
    assert rp.rc == NIC / 2 and rp.rt == NIC and rp.alpha == pytest.approx(1.0)
    rp.catch_up(1e-3 + DCQCN_F * DCQCN_TIMER)  # fast recovery: the gap to Rt halves per period
    assert rp.rc == pytest.approx(NIC - NIC / 2 / 2**DCQCN_F, rel=1e-12)
    assert rp.alpha == pytest.approx((1 - DCQCN_G) ** DCQCN_F, rel=1e-12)
    rp.cnp(1e-3 + DCQCN_F * DCQCN_TIMER)  # a second cut takes α/2 of the rate
    cut = NIC - NIC / 2 / 2**DCQCN_F
    assert rp.rc == pytest.approx(cut * (1 - (1 - DCQCN_G) ** DCQCN_F / 2), rel=1e-12)
    assert rp.rt == pytest.approx(cut, rel=1e-12)
    rp.catch_up(1e-3 + (2 * DCQCN_F + 1) * DCQCN_TIMER)  # then additive increase: Rt += R_AI
    assert rp.rt == pytest.approx(cut + DCQCN_RAI, rel=1e-12)


def test_two_flows_closed_forms():
    # two senders at line rate C into one receiver's link of C: work-conserving, both done at
    # 2S/C plus the route; the bottleneck queue holds what the second sender pushed ahead
    size = 8 << 20
    flows = [("gpu0", "gpu2", size), ("gpu1", "gpu2", size)]
    bare, ends = run_flows(3, flows, Congestion())
    assert max(ends.values()) == pytest.approx(2 * size / NIC, rel=0.01)
    assert max(bare.max_backlog.values()) == pytest.approx(size, rel=0.01)
    # PFC: the queue stops at Xoff plus what the two paused links had started sending, and
    # the link never idles (it drains only to Xon > 0): the same finish, bit for bit
    xoff, xon = 200e3, 100e3
    pfc, pfc_ends = run_flows(3, flows, Congestion(pfc_xoff=xoff, pfc_xon=xon))
    assert sorted(pfc_ends.values()) == sorted(ends.values())
    assert xoff <= max(pfc.max_backlog.values()) <= xoff + 2 * CHUNK
    # ECN + DCQCN: the queue grows at C (2C in, C out) until the senders cut. The first
    # marked chunk finds K to K + c queued (chunks arrive whole), waits that out and its own
    # service, lands, and its CNP comes back (at most the route's latency L each way): the
    # queue grows by K + 2c + 2CL meanwhile; each sender's chunk already planned at the old
    # pace still comes (2c) and the backlog counts the chunk in service (c): at most
    # 2K + 6c + 2CL. The first cut halves each rate (α = 1): together they send at C and
    # the queue stops growing
    k = 100e3
    dc, dc_ends = run_flows(3, flows, Congestion(ecn_threshold=k, dcqcn=True))
    route = sum(p.latency for p in dc._route("gpu0", "gpu2", None))
    assert k <= max(dc.max_backlog.values()) <= 2 * k + 6 * CHUNK + 2 * NIC * route
    assert dc.cnps >= 2 and dc.marks >= dc.cnps
    assert max(dc_ends.values()) >= max(ends.values())  # never faster than line rate


def incast(cc: Congestion):
    # seven senders into gpu0; gpu1 also sends to gpu8 (a victim sharing its NIC)
    flows = [(f"gpu{i}", "gpu0", 2 << 20) for i in range(1, 8)] + [("gpu1", "gpu8", 2 << 20)]
    return run_flows(9, flows, cc)


def test_incast_pfc_slows_the_victim_dcqcn_empties_the_queue():
    bare_fabric, bare = incast(Congestion())
    _, pfc = incast(Congestion(pfc_xoff=200e3, pfc_xon=100e3))
    dc_fabric, dcqcn = incast(Congestion(ecn_threshold=100e3, dcqcn=True))
    victim = 7
    # without PFC the victim leaves at line rate; PFC pauses gpu1's NIC link for the incast
    assert bare[victim] == pytest.approx(2 * (2 << 20) / NIC, rel=0.2)
    assert pfc[victim] > 2 * bare[victim]
    # DCQCN's cuts (one CNP per 50 µs per flow, each halving while α ≈ 1) hold the queue
    # under half the bare incast's: 6.5 C arrive (gpu1's NIC splits between its two
    # flows), C leaves, for S/C — 5.5 S queued
    assert max(bare_fabric.max_backlog.values()) == pytest.approx(5.5 * (2 << 20), rel=0.01)
    assert max(dc_fabric.max_backlog.values()) < max(bare_fabric.max_backlog.values()) / 2
    # the incast's tail moves: the deep cuts recover by timer only (no byte counter, no
    # hyper increase here), so the senders idle the link — later than line rate allows
    assert max(dcqcn.values()) > max(bare.values())


def test_all_to_all_tail_moves_with_congestion_control():
    n, size = 6, 1 << 20
    flows = [(f"gpu{i}", f"gpu{j}", size) for i in range(n) for j in range(n) if i != j]
    tails = {}
    for name, cc in [
        ("none", Congestion()),
        ("dcqcn", Congestion(ecn_threshold=50e3, dcqcn=True)),
        ("pfc", Congestion(pfc_xoff=100e3, pfc_xon=50e3)),
    ]:
        _, ends = run_flows(n, flows, cc)
        tails[name] = max(ends.values())
    # every NIC sends (n − 1)·S: no algorithm beats (n − 1)·S/C
    assert min(tails.values()) >= (n - 1) * size / NIC * 0.999
    assert tails["dcqcn"] != tails["none"]


def test_defaults_are_the_packet_model_and_bad_settings_are_refused():
    assert congestion_of(SimulationSpec()) is None
    sc = synthetic(2, 4, network="packet")
    sc["simulation"]["congestion"] = {"ecn": 3}
    with pytest.raises(ScenarioError, match="accepted fields here: dcqcn, ecn_threshold, pfc_xoff, pfc_xon"):
        cs.load_scenario(sc)
    with pytest.raises(ScenarioError, match="options of the packet network"):
        congestion_of(SimulationSpec(network="flow", congestion={"ecn_threshold": "100 KB"}))
    with pytest.raises(ScenarioError, match="ecn_threshold"):
        congestion_of(SimulationSpec(congestion={"dcqcn": True}))
    with pytest.raises(ScenarioError, match="pfc_xon"):
        congestion_of(SimulationSpec(congestion={"pfc_xoff": "100 KB"}))
    with pytest.raises(ScenarioError, match="pfc_xon < pfc_xoff"):
        congestion_of(SimulationSpec(congestion={"pfc_xoff": "100 KB", "pfc_xon": "200 KB"}))


def test_a_scenario_runs_with_congestion_control():
    # an uncongested pipeline (one GPU per node, point-to-point sends): no queue reaches a
    # threshold, so the step is the packet model's
    sc = synthetic(2, 4, 1e-3, 2e-3, activation=2**22, params=2**22, dp=2, network="packet", gpus_per_node=1)
    sc["cluster"]["nodes"] = 4
    plain = cs.simulate(sc, progress=False).summary["iteration_time_s"]
    sc["simulation"]["congestion"] = {
        "ecn_threshold": "50 KB",
        "dcqcn": True,
        "pfc_xoff": "400 KB",
        "pfc_xon": "200 KB",
    }
    assert cs.simulate(sc, progress=False).summary["iteration_time_s"] == pytest.approx(plain, rel=1e-9)
    spec = SimulationSpec(
        congestion={"ecn_threshold": "100 KB", "dcqcn": True, "pfc_xoff": "400 KB", "pfc_xon": "200 KB"}
    )
    assert congestion_of(spec) == Congestion(100e3, True, 400e3, 200e3)
