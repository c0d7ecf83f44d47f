"""The engine schedules only events something waits for: a held op's end, and per
collective under ``collective_model: analytical`` its start (where a process's first step
would run), its timer and its completion — no notification nobody listens to, no process
around a timer."""

import pytest
import simpy

import clustersim as cs
from clustersim.engine.interpreter import Engine
from clustersim.network import DirectFabric
from clustersim.record import Recorder


def _compute_beside_all_reduces(collectives: int, members: int) -> cs.Program:
    """gpu0 computes once; every GPU then runs ``collectives`` all-reduces in a row."""
    prog = cs.Program(members)
    prog.add(0, "compute", "compute", "F0", duration=10e-3)
    for k in range(collectives):
        for dev in range(members):
            prog.add(
                dev,
                "comm",
                "collective",
                f"ar{k}",
                nbytes=2**26,
                group=tuple(range(members)),
                collective="all_reduce",
                tag=f"ar{k}",
            )
    return prog


@pytest.mark.parametrize(("collectives", "members"), [(1, 2), (3, 2), (2, 8)])
def test_events_are_one_per_held_op_and_three_per_analytical_collective(collectives, members):
    prog = _compute_beside_all_reduces(collectives, members)
    env, rec = simpy.Environment(), Recorder()
    fabric = DirectFabric(env, rec, 25e9, 1e-6)
    engine = Engine(prog, env, fabric, rec, [2**40] * members, alpha=0.0, collective_model="analytical")
    engine.run()
    assert engine.events == 1 + 3 * collectives  # independent of the group size
    # the collectives still run back to back, each for its α-β time, from t = 0
    ends = sorted({e for i, _, e in rec.ops if prog.ops[i].kind == "collective"})
    assert len(ends) == collectives
    assert ends == pytest.approx([ends[0] * (k + 1) for k in range(collectives)], rel=1e-12)
