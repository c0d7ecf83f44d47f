"""The cyclic garbage collector never runs while a Program is compiled or run
(clustersim/engine/collector.py), and is left as the caller had it."""

import gc
import sys

import pytest

import clustersim as cs
from clustersim.engine.collector import collector_paused
from clustersim.errors import SimulationStall

SYNTHETIC = "scenarios/synthetic-4stage-1f1b.yaml"
#: functions that, on the stack, mean a Program is being compiled or run
PAUSED = {"compile_job", "run", "_run_loop", "_evaluate"}


@pytest.fixture
def collections(monkeypatch):
    """Every collection from now on, as the set of function names on its stack; the
    collector runs every 10 allocations of a container, so any phase would see several."""
    seen: list[set[str]] = []

    def record(phase, _info):
        if phase == "start":
            names, f = set(), sys._getframe(1)
            while f is not None:
                names.add(f.f_code.co_name)
                f = f.f_back
            seen.append(names)

    old = gc.get_threshold()
    gc.set_threshold(10)
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    gc.set_threshold(*old)


@pytest.mark.parametrize("evaluator", ["des", "dag"])
def test_no_collection_while_compiling_or_running(collections, evaluator):
    sc = cs.load_scenario(SYNTHETIC).with_overrides(
        {"simulation.evaluator": evaluator, "simulation.network": "analytical"}
    )
    res = cs.simulate(sc, progress=False)
    assert res.summary["evaluator"].startswith(evaluator)
    assert gc.isenabled()
    inside = [names for names in collections if "simulate" in names]
    assert inside, "the collector never ran during simulate(): the test saw nothing"
    assert all(not names & PAUSED for names in inside)
    assert any("assemble_result" in names for names in inside)  # on again for the result


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
