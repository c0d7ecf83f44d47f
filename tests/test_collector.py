"""The cyclic garbage collector never runs while a Program is compiled or run
(clustersim/engine/collector.py), and is left as the caller had it."""

import gc
import importlib
import sys

import pytest

import clustersim as cs
from clustersim.engine.collector import collector_paused
from clustersim.engine.dag import DagEngine
from clustersim.engine.interpreter import Engine
from clustersim.errors import SimulationStall
from clustersim.modes import compile_job
from clustersim.simulate import run_job
from clustersim.trace.assemble import assemble_result

SYNTHETIC = "scenarios/synthetic-4stage-1f1b.yaml"
#: functions that, on the stack, mean a Program is being compiled or run
PAUSED = {f.__code__ for f in (compile_job, Engine.run, Engine._run_loop, DagEngine.run, DagEngine._evaluate)}


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
def test_no_collection_while_compiling_or_running(collections, evaluator, monkeypatch):
    sc = cs.load_scenario(SYNTHETIC).with_overrides(
        {"simulation.evaluator": evaluator, "simulation.network": "analytical"}
    )
    enabled = []  # whether the collector is on while the result is built

    def assemble(*args, **kwargs):
        enabled.append(gc.isenabled())
        return assemble_result(*args, **kwargs)

    monkeypatch.setattr(importlib.import_module("clustersim.simulate"), "assemble_result", assemble)
    res = cs.simulate(sc, progress=False)
    assert res.summary["evaluator"].startswith(evaluator)
    assert gc.isenabled()
    inside = [codes for codes in collections if run_job.__code__ in codes]
    assert inside, "the collector never ran during simulate(): the test saw nothing"
    assert all(not codes & PAUSED for codes in inside)
    assert enabled == [True]  # on again for the result


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


class _Tracked:
    """An object the cyclic collector tracks (instances of a class are)."""


def _generation_of(obj) -> int:
    return next(g for g in range(3) if any(o is obj for o in gc.get_objects(generation=g)))


def test_objects_made_inside_leave_in_the_oldest_generation():
    # so the first young collection after a run does not traverse its million ops again
    with collector_paused():
        made = _Tracked()
    assert _generation_of(made) == 2
    assert gc.get_freeze_count() == 0


def test_a_callers_frozen_objects_stay_frozen():
    kept = _Tracked()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            made = _Tracked()
        assert gc.get_freeze_count() == frozen  # (kept is still among them)
        assert _generation_of(made) == 0
    finally:
        gc.unfreeze()
    assert _generation_of(kept) == 2
