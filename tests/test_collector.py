"""The cyclic garbage collector never runs while simulate() resolves, compiles and runs a
job and builds its Result (clustersim/engine/collector.py), and is left as the caller had it."""

import gc
import sys

import pytest

import clustersim as cs
from clustersim.compilers import compile_job
from clustersim.engine.collector import collector_paused
from clustersim.engine.dag import DagEngine
from clustersim.engine.interpreter import Engine
from clustersim.engine.lane_core import LaneStepper
from clustersim.errors import SimulationStall
from clustersim.resolve import resolve
from clustersim.resolve.estimate import check_budget
from clustersim.simulate import build_engine, run_job
from clustersim.trace.assemble import assemble_result

SYNTHETIC = "scenarios/synthetic-4stage-1f1b.yaml"
#: functions that, on the stack, mean a job is being resolved, estimated (its topology
#: graph built), compiled or run, or its Result built
PAUSED = {
    f.__code__
    for f in (
        resolve,
        check_budget,
        compile_job,
        build_engine,
        Engine.run,
        DagEngine.run,
        assemble_result.__wrapped__,  # (its own pause's wrapper is contextlib's)
    )
}


@pytest.fixture
def collections(monkeypatch):
    """Every collection from now on, as the set of code objects on its stack; the
    collector runs every 10 allocations of a container, so any phase would see several."""
    seen: list[set] = []

    def record(phase, _info):
        if phase == "start":
            codes, f = set(), sys._getframe(1)
            while f is not None:
                codes.add(f.f_code)
                f = f.f_back
            seen.append(codes)

    old = gc.get_threshold()
    gc.set_threshold(10)
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    gc.set_threshold(*old)


@pytest.mark.parametrize("evaluator", ["des", "dag"])
@pytest.mark.parametrize("entry", ["simulate", "run_job"])
def test_no_collection_while_simulating(collections, evaluator, entry):
    sc = cs.load_scenario(SYNTHETIC).with_overrides(
        {"simulation.evaluator": evaluator, "simulation.network": "analytical"}
    )
    job = resolve(sc) if entry == "run_job" else None  # (run_job's caller resolves unpaused)
    assert collections, "the collector never ran: the test would see nothing"
    before = len(collections)
    res = cs.simulate(sc, progress=False) if job is None else run_job(job)
    assert res.summary["evaluator"].startswith(evaluator)
    assert gc.isenabled()
    assert not [codes for codes in collections[before:] if codes & PAUSED]


@pytest.mark.parametrize("evaluator", ["des", "dag"])
def test_an_evaluator_run_directly_pauses_the_collector_itself(collections, evaluator):
    # (benchmarks and the multi-job runner call Engine.run / DagEngine.run themselves)
    sc = cs.load_scenario(SYNTHETIC).with_overrides(
        {
            "simulation.evaluator": evaluator,
            "simulation.network": "packet" if evaluator == "des" else "analytical",
        }
    )
    job = resolve(sc)
    engine, note = build_engine(job, compile_job(job))
    assert note.startswith(evaluator)
    before = len(collections)
    engine.run()
    assert gc.isenabled()
    loops = {LaneStepper.run.__code__}  # (what each run spends its time in)
    assert not [codes for codes in collections[before:] if codes & loops]


def test_a_collector_turned_off_stays_off_and_one_on_comes_back_after_an_error():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(SimulationStall), collector_paused():
        assert not gc.isenabled()
        raise SimulationStall("a deadlock inside the block")
    assert gc.isenabled()


def test_what_runs_leave_in_cycles_is_collected_between_runs():
    # a sweep calls simulate() thousands of times in one process: each run's reference
    # cycles (a SimPy environment and what it reaches) must be left to the young
    # generations, not kept for a full collection that may never come (moving a run's
    # objects to the oldest generation when the pause ends did that: +1 environment a run)
    import simpy

    def environments() -> int:
        gc.collect(1)  # the young generations only
        return sum(isinstance(o, simpy.Environment) for o in gc.get_objects())

    sc = cs.load_scenario(SYNTHETIC)
    before = environments()  # (other tests' results may hold some)
    for _ in range(6):
        cs.simulate(sc, progress=False)
    assert environments() - before <= 1


@pytest.mark.parametrize("network", ["packet", "analytical"])
def test_a_finished_run_is_freed_by_reference_counting(network):
    # nothing a run makes is in a reference cycle once simulate() returns (a lane is its
    # own end event; a link forgets a flow once its last chunk crossed; a flow carries no
    # fabric), so reference counting frees the run and the collector's first pass after it
    # has only SimPy's Environment to traverse: it binds its event constructors to itself
    import simpy

    sc = cs.load_scenario(SYNTHETIC).with_overrides({"simulation.network": network})
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        cs.simulate(sc, progress=False)
        gc.collect()
        left = [o for o in gc.garbage if type(o).__module__ not in ("builtins", "itertools")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert [type(o) for o in left] == [simpy.Environment]
