"""A chunk's split-backward pass (and its items) built when first read, layer kinds and model
ends shared by value, and a pass's walks in C (issue 38 item 8): none changes a cost, an
estimate or a plan's identity — the chunk costs, estimates and identities of random plans are
those of every pass built at once, every layer kind and end made afresh and every walk in
Python (``_chost.c`` off), to the bit."""

from __future__ import annotations

import pickle
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.experiments import plan_estimate
from clustersim.experiments.plan_estimate import Estimator, idle_collective, schedule_shape
from clustersim.experiments.plans import plan_candidates
from clustersim.experiments.sweeper import base_raw
from clustersim.resolve import resolve
from clustersim.scenario import Scenario
from clustersim.scenario.loader import apply_overrides
from clustersim.workload import host, segments, stage_builder
from clustersim.workload.lazy_passes import LazyPasses

ROOT = Path(__file__).resolve().parent.parent
SEARCHES = ("megatron-162b-64gpu-search.yaml", "mixtral-8x7b-64xH100-ep8.yaml")


def _builder(calls: list, phase: str, value: tuple):
    def build() -> tuple:
        calls.append(phase)
        return value

    return build


def test_a_pass_is_built_once_on_its_first_read_and_the_mapping_is_the_dict_of_all():
    calls: list[str] = []
    lazy = LazyPasses(
        ("F", "B", "Bi"),
        {"F": ("f",)},
        {"B": _builder(calls, "B", ("b",)), "Bi": _builder(calls, "Bi", ("i",))},
    )
    assert list(lazy) == ["F", "B", "Bi"] and len(lazy) == 3
    assert "Bi" in lazy and "W" not in lazy and calls == []  # asking which phases exist builds none
    assert lazy["Bi"] == ("i",) and lazy["Bi"] is lazy["Bi"] and calls == ["Bi"]
    with pytest.raises(KeyError):
        lazy["W"]
    assert lazy.get("W") is None
    eager = {"F": ("f",), "B": ("b",), "Bi": ("i",)}
    assert lazy == eager and eager == lazy and calls == ["Bi", "B"]
    assert repr(lazy) == repr(eager)
    assert pickle.loads(pickle.dumps(lazy)) == eager
    with pytest.raises(TypeError):
        hash(lazy)  # as a dict's: a StageCost holding it is as unhashable as before
    assert lazy != {"F": ("f",), "B": ("b",)}
    with pytest.raises(ValueError):
        LazyPasses(("F", "B"), {"F": ()}, {"F": lambda: ()})


def _eager(order, made, make):
    """What :class:`LazyPasses` stands for: every pass built at once."""
    return {ph: made[ph] if ph in made else make[ph]() for ph in order}


@cache
def _plans(name: str) -> tuple[dict, list[dict]]:
    sc = cs.load_scenario(ROOT / "scenarios" / name)
    return base_raw(sc), plan_candidates(sc, sc.num_gpus)


def _fields(e) -> tuple:
    return tuple(repr(x) for x in e.__dict__.values())


def _run(monkeypatch, sc: Scenario, plan: dict, eager: bool) -> tuple:
    """(chunk costs, estimate, identity) of ``plan``, from emptied caches; ``eager``: every
    pass built at once, no layer kind or model end shared, and the Python's walks, not the C's."""
    schedule_shape.cache_clear()
    stage_builder.cache_clear()
    idle_collective.cache_clear()
    with monkeypatch.context() as m:
        if eager:
            m.setattr(stage_builder, "LazyPasses", _eager)
            m.setattr(stage_builder, "cached_layer_kind", stage_builder._layer_kind)
            m.setattr(stage_builder, "cached_ends", stage_builder._ends)
            for module in (host, segments, plan_estimate):
                m.setattr(module, "_accel", None)
        est = Estimator()
        out = _fields(est.estimate(sc, plan)), est.identity(sc, plan)
        return resolve(sc).chunk_costs, *out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SEARCHES), st.integers(0, 10**6))
def test_random_plans_cost_and_estimate_as_with_every_pass_built_at_once(monkeypatch, name, pick):
    raw, plans = _plans(name)
    plan = plans[pick % len(plans)]
    try:
        sc = Scenario(apply_overrides(raw, plan))
    except cs.ScenarioError:
        return
    lazy = _run(monkeypatch, sc, plan, eager=False)
    assert any(isinstance(c.passes, LazyPasses) for c in lazy[0])  # the lazy path is exercised
    eager = _run(monkeypatch, sc, plan, eager=True)
    assert not any(isinstance(c.passes, LazyPasses) for c in eager[0])
    assert lazy[1:] == eager[1:]
    assert lazy[0] == eager[0]  # every field of every chunk cost, its passes built on reading
    assert repr(lazy[0]) == repr(eager[0])


def test_a_split_backward_reads_the_pass_it_left_unbuilt(monkeypatch):
    """Under a zero-bubble schedule the estimate reads ``Bi``: built then, the segments
    every pass built at once gives."""
    raw, plans = _plans(SEARCHES[0])
    plan = next(p for p in plans if p.get("parallel.schedule") == "zb_h1")
    sc = Scenario(apply_overrides(raw, plan))
    est = Estimator()
    est.estimate(sc, plan)
    cost = est._priced_job(sc, plan)[0].chunk_costs[0]
    assert "Bi" in cost.passes._made  # read by the estimate
    assert "Bi" not in resolve(sc).chunk_costs[0].passes._made  # not where nothing reads it
    monkeypatch.setattr(stage_builder, "LazyPasses", _eager)
    eager = resolve(sc).chunk_costs[0].passes
    assert eager["Bi"] == cost.passes["Bi"] and eager["Bi"] != eager["B"]
