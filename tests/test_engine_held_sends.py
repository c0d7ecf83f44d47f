"""Sends on a fabric that knows their time up front (``Fabric.fixed_time``) are held by the
engine itself, in one SimPy event each: the same times, in the same order, as asking
the fabric for a transfer."""

import pytest
import simpy

import clustersim as cs
from clustersim.engine.interpreter import Engine
from clustersim.engine.lanes import HOLD
from clustersim.engine.network_setup import build_network
from clustersim.network import DirectFabric
from clustersim.record import Recorder
from clustersim.resolve import resolve
from tests.conftest import synthetic


class _Asked:
    """A fabric that hides its fixed times: the engine asks it for every transfer."""

    def __init__(self, fabric):
        self.fabric = fabric

    def __getattr__(self, name):
        return getattr(self.fabric, name)

    def fixed_time(self, src, dst, nbytes):
        return None


def _run(sc, timed_by_fabric: bool):
    prog = cs.compile_scenario(sc)
    env, rec = simpy.Environment(), Recorder()
    fabric = build_network(resolve(sc), env, rec)
    engine = Engine(prog, env, _Asked(fabric) if timed_by_fabric else fabric, rec, [2**40] * prog.num_devices)
    engine.run()
    return rec, engine.events, engine


def _send_plans(engine) -> list[int]:
    """The plan codes (``what``) of the engine's send ops: plan entries are (id, what, ...);
    each lane's plan ends with a sentinel of id -1."""
    ops = engine.program.ops
    return [
        what
        for _, plan in engine._plans
        for op_id, what, *_ in plan
        if op_id >= 0 and ops[op_id].kind == "send"
    ]


@pytest.mark.parametrize("network", ["direct", "analytical"])
@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zb_h1"])
def test_held_sends_match_fabric_transfers(network, schedule):
    raw = synthetic(
        4,
        8,
        1e-3,
        2e-3,
        schedule=schedule,
        activation=2**22,
        params=2**20,
        latency=3e-6,
        iterations=2,
        dp=2,
        network=network,
        layers_per_stage=2,
    )
    raw["parallel"]["virtual_stages"] = cs.SCHEDULES[schedule].chunks or 2  # None: any count
    sc = cs.load_scenario(raw)
    held, held_events, held_engine = _run(sc, timed_by_fabric=False)
    asked, asked_events, asked_engine = _run(sc, timed_by_fabric=True)
    # the fixed-time path really is taken: the engine holds every send itself (HOLD, a known
    # time), while a fabric that hides its times has none held
    held_sends, asked_sends = _send_plans(held_engine), _send_plans(asked_engine)
    assert held_sends and all(what == HOLD for what in held_sends)
    assert len(asked_sends) == len(held_sends) and HOLD not in asked_sends
    assert held.ops == asked.ops  # every (op, start, end), in op-id order
    assert held.memory == asked.memory
    assert held_events == asked_events  # one event per send either way


def test_direct_fixed_time_is_latency_plus_bytes_over_bandwidth():
    env = simpy.Environment()
    fabric = DirectFabric(env, Recorder(), 2.5e10, 3e-6)
    assert fabric.fixed_time("gpu0", "gpu1", 10**9) == pytest.approx(3e-6 + 10**9 / 2.5e10, rel=1e-15)
    assert fabric.fixed_time("gpu1", "gpu1", 10**9) == 0.0
    done = fabric.transfer("gpu0", "gpu1", 10**9)
    env.run(done)
    assert env.now == fabric.fixed_time("gpu0", "gpu1", 10**9)
