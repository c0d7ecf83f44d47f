"""Malformed Programs fail before running; stalled runs fail with the stuck ops named."""

import pytest
import simpy

import clustersim as cs
from clustersim.engine.interpreter import Engine
from clustersim.network import DirectFabric
from clustersim.record import Recorder


def _run(prog: cs.Program):
    env, rec = simpy.Environment(), Recorder()
    Engine(prog, env, DirectFabric(env, rec, 1e9, 0.0), rec, [10**12] * prog.num_devices).run()
    return rec


def _cycle() -> cs.Program:
    prog = cs.Program(2)
    a = prog.add(0, "compute", "compute", "A", duration=1.0)
    b = prog.add(1, "compute", "compute", "B", duration=1.0, deps=(a.id,))
    a.deps = (b.id,)
    return prog


def test_cycle_is_rejected_naming_ops():
    with pytest.raises(cs.ProgramError, match=r"cycle.*'A' on gpu0.*'B' on gpu1"):
        _cycle().check()


def test_cycle_through_lane_order_is_rejected():
    # B waits on D on the other device, but D's lane has C first, and C waits on B's successor.
    prog = cs.Program(2)
    b = prog.add(0, "compute", "compute", "B", duration=1.0)
    b2 = prog.add(0, "compute", "compute", "B2", duration=1.0)
    c = prog.add(1, "compute", "compute", "C", duration=1.0, deps=(b2.id,))
    d = prog.add(1, "compute", "compute", "D", duration=1.0)
    b.deps = (d.id,)
    assert c.id < d.id
    with pytest.raises(cs.ProgramError, match="cycle"):
        prog.check()


def test_unmatched_recv_is_rejected():
    prog = cs.Program(2)
    prog.add(1, "recv", "recv", "recv X", nbytes=10)
    with pytest.raises(cs.ProgramError, match=r"'recv X' on gpu1/recv.*no matching send"):
        prog.check()


def test_send_recv_size_mismatch_is_rejected():
    prog = cs.Program(2)
    s = prog.add(0, "send", "send", "send X", nbytes=10)
    r = prog.add(1, "recv", "recv", "recv X", nbytes=20, peer=s.id)
    s.peer = r.id
    with pytest.raises(cs.ProgramError, match="disagree on size"):
        prog.check()


def test_missing_dependency_is_rejected():
    prog = cs.Program(1)
    prog.add(0, "compute", "compute", "A", deps=(7,))
    with pytest.raises(cs.ProgramError, match="depends on op #7, which does not exist"):
        prog.check()


def test_unchecked_deadlock_stalls_with_report():
    with pytest.raises(cs.SimulationStall) as e:
        _run(_cycle())
    msg = str(e.value)
    assert "2 ops unfinished" in msg
    assert "'A' on gpu0/compute) waits for Op#1('B' on gpu1/compute)" in msg


def _missing_member() -> cs.Program:
    prog = cs.Program(3)
    for dev in (0, 1):  # gpu2 is in the group but has no op for it
        prog.add(
            dev,
            "comm",
            "collective",
            "allreduce",
            nbytes=100,
            group=(0, 1, 2),
            collective="all_reduce",
            tag="ar0",
        )
    return prog


def test_collective_member_that_never_arrives_is_named():
    with pytest.raises(cs.ProgramError, match="collective 'ar0': members that never reach it: gpu2"):
        _missing_member().check()
    with pytest.raises(cs.SimulationStall, match="never arrived: gpu2"):  # and if run unchecked
        _run(_missing_member())


def test_crossed_collective_order_is_a_cycle():
    prog = cs.Program(2)
    for dev, order in ((0, ("a", "b")), (1, ("b", "a"))):
        for tag in order:
            prog.add(dev, "comm", "collective", tag, nbytes=8, group=(0, 1), collective="all_reduce", tag=tag)
    with pytest.raises(cs.ProgramError, match="cycle"):
        prog.check()
    with pytest.raises(cs.SimulationStall, match="never arrived"):
        _run(prog)


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda ops: setattr(ops[1], "nbytes", 200), "members disagree"),
        (lambda ops: [setattr(o, "group", (0, 0, 1)) for o in ops], "gpu0 appears twice"),
        (lambda ops: [setattr(o, "group", (0, 1, 5)) for o in ops], "group member 5 is not a device"),
    ],
)
def test_bad_collective_groups(edit, message):
    prog = cs.Program(2)
    ops = [
        prog.add(d, "comm", "collective", "ar", nbytes=100, group=(0, 1), collective="all_reduce", tag="ar")
        for d in (0, 1)
    ]
    edit(ops)
    with pytest.raises(cs.ProgramError, match=message):
        prog.check()


def test_bad_schedule_order_is_rejected():
    @cs.register_schedule("test_broken", "drops a backward")
    def broken(stage, p, m):
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m - 1)]

    try:
        sc = cs.load_scenario(
            __import__("tests.conftest", fromlist=["synthetic"]).synthetic(2, 3, schedule="test_broken")
        )
        with pytest.raises(cs.ProgramError, match="'test_broken' stage 0: the order must hold F and B"):
            cs.simulate(sc)
    finally:
        del cs.SCHEDULES["test_broken"]


def test_custom_schedule_runs():
    @cs.register_schedule("test_fifo", "GPipe with first-in-first-out backwards")
    def fifo(stage, p, m):
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]

    try:
        from tests.conftest import synthetic

        p, m, f, b = 3, 5, 1e-3, 2e-3
        res = cs.simulate(synthetic(p, m, f, b, schedule="test_fifo"))
        assert res.summary["iteration_time_s"] == pytest.approx((m + p - 1) * (f + b), rel=1e-12)
    finally:
        del cs.SCHEDULES["test_fifo"]


def test_negative_memory_is_rejected():
    prog = cs.Program(1)
    prog.add(0, "compute", "compute", "F", duration=1.0, mem_free=-5)
    with pytest.raises(cs.ProgramError, match=r"'F' on gpu0.*must be ≥ 0 bytes.*mem_free=-5"):
        prog.check()


def test_a_cycle_is_reported_as_its_chain_with_the_closing_wait():
    prog = cs.Program(2)
    b = prog.add(0, "compute", "compute", "B", duration=1.0)
    b2 = prog.add(0, "compute", "compute", "B2", duration=1.0)
    prog.add(1, "compute", "compute", "C", duration=1.0, deps=(b2.id,))
    d = prog.add(1, "compute", "compute", "D", duration=1.0)
    b.deps = (d.id,)
    with pytest.raises(cs.ProgramError) as e:
        prog.check()
    msg = str(e.value)
    # B waits for D, D for C (lane order), C for B2, B2 for B (lane order): 4 ops, one cycle
    assert msg.startswith("dependency cycle (would deadlock), 4 ops stuck: ")
    assert "'B' on gpu0/compute) depends on Op#3('D' on gpu1/compute)" in msg
    assert "'D' on gpu1/compute) waits on its lane for Op#2('C' on gpu1/compute)" in msg
    assert "'C' on gpu1/compute) depends on Op#1('B2' on gpu0/compute)" in msg
    assert "and, closing the cycle, " in msg and msg.count(" waits on its lane for ") == 2


@pytest.mark.parametrize("evaluator", ["auto", "des"])
def test_a_schedule_that_deadlocks_is_named_with_its_shape(evaluator):
    # stage 0 waits for B0 before it sends F1; stage 1 wants F1 before it runs B0. The
    # DAG pass (auto, on the direct network) proves Programs acyclic by running them, so
    # compiling leaves the cycle to it and the stall names it; des checks before the run.
    @cs.register_schedule("test_crossed", "stage 0 without warm-up, stage 1 GPipe: a deadlock")
    def crossed(stage, p, m):
        if stage == 0:
            return [x for j in range(m) for x in (("F", j), ("B", j))]
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]

    try:
        sc = __import__("tests.conftest", fromlist=["synthetic"]).synthetic(2, 2, schedule="test_crossed")
        sc["simulation"] = {**sc.get("simulation", {}), "evaluator": evaluator}
        with pytest.raises(cs.ProgramError) as e:
            cs.simulate(sc)
    finally:
        del cs.SCHEDULES["test_crossed"]
    msg = str(e.value)
    assert msg.startswith(
        "the pipeline Program of schedule 'test_crossed' (pp = 2, m = 2, virtual_stages = 1)"
    )
    assert "dependency cycle" in msg and "closing the cycle" in msg
