"""NCCL protocols (clustersim.collectives.protocol): the least-time choice, the latency paid
once per call and the bandwidth fraction as wire bytes — closed forms on an idle fabric,
the same under both collective models, and today's behaviour when a cluster states none."""

from __future__ import annotations

import pytest
import simpy

import clustersim as cs
from clustersim.collectives import Shape, Tuning, run_collective
from clustersim.collectives.group import Group
from clustersim.collectives.protocol import BASE_LATENCY, SIMPLE, Protocol, choose, resolve_protocols
from clustersim.collectives.registry import estimate_time, plan
from clustersim.errors import ScenarioError
from clustersim.network.base import DirectFabric
from clustersim.record import Recorder

B, LAT = 100e9, 1e-6
TABLE = {
    "ll": {"latency": 5e-6, "efficiency": 0.5},
    "simple": {"latency": 50e-6, "efficiency": 1.0, "per_step": True},
}


def _fabric(env):
    return DirectFabric(env, Recorder(), bandwidth=B, latency=LAT)


def _ring(n: int, s: float, alpha: float) -> float:
    return estimate_time("all_reduce", "ring", Shape(n, B, alpha + LAT), s)


def test_choice_is_the_least_latency_plus_wire_time():
    ll, simple = resolve_protocols(TABLE)
    assert (ll.name, simple.name) == ("ll", "simple")
    # LL's time is 5 µs + t(2S), Simple's 50 µs + t(S): with t linear in S of slope k,
    # they cross where 45 µs = k·S
    k = 2 * 3 / 4 / B  # ring all-reduce on 4 ranks: 2(n−1)/n · S/B
    cross = 45e-6 / k
    pick = lambda s: choose((ll, simple), s, lambda w: w * k)  # noqa: E731
    assert pick(0.9 * cross)[0] is ll and pick(1.1 * cross)[0] is simple
    assert pick(cross / 2)[1] == pytest.approx(5e-6 + cross * k)


def test_fabric_run_is_latency_plus_the_schedule_on_wire_bytes():
    env = simpy.Environment()
    members = [f"gpu{i}" for i in range(4)]
    s = 2**16  # LL: 5 µs + the ring on 2S bytes
    proc = env.process(
        run_collective(env, _fabric(env), "all_reduce", members, s, "ring", Tuning(0.0, protocols=TABLE))
    )
    env.run(proc)
    assert env.now == pytest.approx(5e-6 + _ring(4, 2 * s, 0.0), rel=1e-9)


def test_analytical_plan_equals_the_fabric_time():
    s = 2**26
    env = simpy.Environment()
    fabric = _fabric(env)
    members = [f"gpu{i}" for i in range(4)]
    name, proto, t = plan(Group(env, fabric, members, 0.0, protocols=TABLE), "all_reduce", s, "ring")
    proc = env.process(
        run_collective(env, fabric, "all_reduce", members, s, "ring", Tuning(0.0, protocols=TABLE))
    )
    env.run(proc)
    assert (name, proto.name) == ("ring", "simple") and env.now == pytest.approx(t, rel=1e-9)
    assert t == pytest.approx(50e-6 + _ring(4, s, 0.0), rel=1e-12)


def test_a_reduce_scatter_and_an_all_gather_cost_an_all_reduce_plus_one_base_latency():
    # NCCL tuning.cc: latency = baseLat + nsteps · hwLat, nsteps 2(n − 1) for an all-reduce
    # and n − 1 for its two halves; the ring moves the same bytes in both
    s = 2**26
    env = simpy.Environment()
    group = Group(env, _fabric(env), [f"gpu{i}" for i in range(4)], 0.0, protocols=TABLE)
    ar, rs, ag = (plan(group, kind, s, "ring") for kind in ("all_reduce", "reduce_scatter", "all_gather"))
    assert {p.name for _, p, _ in (ar, rs, ag)} == {"simple"}
    base = BASE_LATENCY["simple"]
    assert rs[1].latency == pytest.approx(base + (50e-6 - base) / 2, rel=1e-12)
    assert rs[2] + ag[2] == pytest.approx(ar[2] + base, rel=1e-12)
    # a latency below baseLat is paid whole, once; other kinds, and a latency not per step, in full
    assert Protocol("simple", 1e-6, 1.0, True).for_kind("all_gather").latency == 1e-6
    assert Protocol("simple", 50e-6, 1.0, True).for_kind("all_to_all").latency == 50e-6
    assert Protocol("simple", 50e-6, 1.0).for_kind("reduce_scatter").latency == 50e-6


def test_without_protocols_the_cost_is_the_pure_alpha_beta_form():
    env = simpy.Environment()
    group = Group(env, _fabric(env), [f"gpu{i}" for i in range(4)], 2e-6)
    assert group.protocols == (SIMPLE,)
    assert plan(group, "all_reduce", 2**20, "ring")[2] == _ring(4, 2**20, 2e-6)


def test_one_member_pays_no_protocol_latency():
    env = simpy.Environment()
    proc = env.process(
        run_collective(env, _fabric(env), "all_reduce", ["gpu0"], 2**20, tuning=Tuning(protocols=TABLE))
    )
    env.run(proc)
    assert env.now == 0.0


def test_wire_bytes_round_up():
    assert Protocol("ll128", 0.0, 0.71).wire_bytes(71) == 100
    assert SIMPLE.wire_bytes(12345) == 12345


def _raw(protocols):
    return {
        "cluster": {"preset": "dgx_a100", "nodes": 1, "collective_protocols": protocols},
        "model": {"kind": "synthetic", "layers": 1, "forward": 0, "backward": 0},
        "training": {"global_batch": 8},
        "parallel": {"pp": 1, "dp": 8},
    }


def test_scenario_field_is_validated_and_named():
    with pytest.raises(ScenarioError, match="collective_protocols"):
        cs.load_scenario(_raw({"ll": {"latency": 1e-6, "efficiency": 1.5}}))
    with pytest.raises(ScenarioError, match="collective_protocols"):
        cs.load_scenario(_raw({"fast": {"latency": 1e-6, "efficiency": 0.5}}))
    sc = cs.load_scenario(_raw({"simple": {"latency": "10 us", "efficiency": 1}}))
    assert sc.cluster.collective_protocols["simple"].latency == pytest.approx(1e-5)
