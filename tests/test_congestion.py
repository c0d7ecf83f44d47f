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
    DCQCN_BYTE_COUNTER,
    DCQCN_F,
    DCQCN_G,
    DCQCN_RAI,
    DCQCN_RHAI,
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
    # the paper's byte counter (10 MB) never counts a stage for these 2 MiB flows: the same
    # run to the bit; a 64 KiB counter recovers ~10 × sooner and the tail falls back near the
    # bare incast's (the queue grows back with it)
    _, paper_b = incast(Congestion(ecn_threshold=100e3, dcqcn=True, byte_counter=DCQCN_BYTE_COUNTER))
    assert paper_b == dcqcn
    small_fabric, small_b = incast(Congestion(ecn_threshold=100e3, dcqcn=True, byte_counter=64 * 1024))
    assert max(small_b.values()) < max(dcqcn.values()) / 2
    assert max(small_fabric.max_backlog.values()) > max(dc_fabric.max_backlog.values())


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
    with pytest.raises(
        ScenarioError,
        match="accepted fields here: dcqcn, dcqcn_byte_counter, ecn_threshold, pfc_xoff, pfc_xon",
    ):
        cs.load_scenario(sc)
    with pytest.raises(ScenarioError, match="options of the packet network"):
        congestion_of(SimulationSpec(network="flow", congestion={"ecn_threshold": "100 KB"}))
    with pytest.raises(ScenarioError, match="ecn_threshold"):
        congestion_of(SimulationSpec(congestion={"dcqcn": True}))
    with pytest.raises(ScenarioError, match="pfc_xon"):
        congestion_of(SimulationSpec(congestion={"pfc_xoff": "100 KB"}))
    with pytest.raises(ScenarioError, match="pfc_xon < pfc_xoff"):
        congestion_of(SimulationSpec(congestion={"pfc_xoff": "100 KB", "pfc_xon": "200 KB"}))
    with pytest.raises(ScenarioError, match="dcqcn_byte_counter"):  # a counter of DCQCN's only
        congestion_of(SimulationSpec(congestion={"ecn_threshold": "100 KB", "dcqcn_byte_counter": "10 MB"}))


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


def test_byte_counter_and_hyper_increase_closed_forms():
    # after three cuts the target sits far below the line; then each period brings one timer
    # tick and B bytes. Timer event i (T = i, BC = i − 1): fast recovery while i ≤ F, additive
    # at i = F + 1, hyper after; byte event i (T = BC = i): fast recovery while i ≤ F, hyper
    # after — so n periods add R_AI + (2n − 2F − 1)·R_HAI to Rt (QCN's reaction point)
    b, t0, n = 1e6, 1e-3, DCQCN_F + 3
    both, timer_only = ReactionPoint(NIC, b), ReactionPoint(NIC)
    for rp in (both, timer_only):
        for _ in range(3):
            rp.cnp(t0)
    rt0 = both.rt
    for i in range(1, n + 1):
        for rp in (both, timer_only):
            rp.catch_up(t0 + i * DCQCN_TIMER)
            rp.count(b, t0 + i * DCQCN_TIMER)
    assert both.rt == pytest.approx(rt0 + DCQCN_RAI + (2 * n - 2 * DCQCN_F - 1) * DCQCN_RHAI, rel=1e-12)
    assert timer_only.rt == pytest.approx(rt0 + (n - DCQCN_F) * DCQCN_RAI, rel=1e-12)  # never hyper


def recovery_time(byte_counter):
    """A sender cut once from line rate C, sending B-byte chunks at its rate: when it is back
    within ε = 1e-3 of C."""
    b = 64 * 1024
    rp, t = ReactionPoint(NIC, byte_counter), 0.0
    rp.cnp(0.0)
    while True:
        rp.count(b, t)
        if rp.rc >= (1 - 1e-3) * NIC:
            return t
        t += b / rp.rc


def test_recovery_time_with_byte_counter_vs_timer_only():
    # after one cut from C (α = 1): Rc = C/2, Rt = C; every increase event halves the gap to
    # C (Rt stays clamped at C whatever the stage), so ε needs n = ⌈log2(1/(2ε))⌉ = 9 events.
    # Timer only: 9 periods (the next chunk after 9T). With B = one 64 KiB chunk and no
    # timer tick before (Σ B/r_k < T): event k comes with the k-th chunk, r_k = C − C/2^(k+1)
    b, n = 64 * 1024, 9
    timer = recovery_time(None)
    assert n * DCQCN_TIMER <= timer < n * DCQCN_TIMER + b / (NIC / 2)
    closed = sum(b / (NIC - NIC / 2 ** (k + 1)) for k in range(1, n))
    assert closed < DCQCN_TIMER
    assert recovery_time(b) == pytest.approx(closed, rel=1e-12)


def test_two_staggered_flows_converge_to_the_fair_share():
    # flow A alone at C, flow B joins 0.5 ms later into the same receiver link: with the byte
    # counter both rates settle near C/2 (DCQCN's fluid fixed point: equal rates on one
    # bottleneck, Zhu et al. §4); nothing beats 2S/C (B, alone at the end, recovers late)
    size, join = 16 << 20, 0.5e-3
    env = simpy.Environment()
    cc = Congestion(ecn_threshold=100e3, dcqcn=True, byte_counter=DCQCN_BYTE_COUNTER)
    fabric = CongestionFabric(env, Recorder(), build_topology(one_gpu_per_node(3, NIC, 1e-6)), cc, CHUNK)
    ends, rates = {}, []
    fabric.transfer("gpu0", "gpu2", size).callbacks.append(lambda _e: ends.__setitem__("a", env.now))

    def late():
        yield env.timeout(join)
        fabric.transfer("gpu1", "gpu2", size).callbacks.append(lambda _e: ends.__setitem__("b", env.now))
        while not ends:  # sample both senders' rates while both send
            yield env.timeout(0.1e-3)
            rates.append([fabric.senders[p].rc for p in (("gpu0", "gpu2"), ("gpu1", "gpu2"))])

    env.process(late())
    env.run()
    assert max(ends.values()) >= 2 * size / NIC
    settled = rates[len(rates) // 2 :]
    mean_a, mean_b = (sum(r[i] for r in settled) / len(settled) for i in (0, 1))
    assert mean_a == pytest.approx(NIC / 2, rel=0.2) and mean_b == pytest.approx(NIC / 2, rel=0.2)
    assert mean_a == pytest.approx(mean_b, rel=0.15)
