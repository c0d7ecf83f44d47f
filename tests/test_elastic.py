"""Elastic re-layout (docs/rlhf.md, "Elastic"): with no fluctuation the goodput is the fixed
layout's; every switch is on the timeline with its cost; a grow moves the state the new GPUs
lack; a shrink that loses a stage restores the checkpoint; determinism and refusals."""

from __future__ import annotations

import pandas as pd
import pytest

import clustersim as cs
from clustersim.compilers import check_job
from clustersim.errors import ScenarioError
from clustersim.experiments.elastic import Level, elastic, read_availability
from clustersim.faults.availability import availability_from_failures
from clustersim.faults.state import rank_checkpoint_bytes
from clustersim.resolve import resolve
from clustersim.scenario.loader import read_yaml

RAW = {**read_yaml("scenarios/quickstart.yaml"), "simulation": {"fidelity": "fast"}}
PLANS = {
    8: {"cluster.nodes": 1, "parallel.tp": 2, "parallel.pp": 1, "parallel.dp": 4},
    16: {"parallel.tp": 2, "parallel.pp": 1, "parallel.dp": 8},
}
PP2 = {16: {"parallel.tp": 2, "parallel.pp": 2, "parallel.dp": 4}}
_RATES: dict = {}


def chooser(plans):
    """A level's plan from ``plans`` (not searched: fast), its rate simulated."""

    def choose(raw, gpus, top_k):
        sc = cs.load_scenario(raw, plans[gpus])
        key = tuple(sorted(plans[gpus].items()))
        if key not in _RATES:
            _RATES[key] = (
                sc.training.global_batch / cs.simulate(sc, progress=False).summary["iteration_time_s"]
            )
        return Level(gpus, plans[gpus], _RATES[key], check_job(resolve(sc)))

    return choose


def test_no_fluctuation_goodput_equals_the_fixed_layout():
    res = elastic(RAW, [(0, 16)], 3600.0, restore_bandwidth=5e9, warmup_s=60, choose=chooser(PLANS))
    s = res.summary
    assert s["switches"] == 0 and s["switch_cost_s"] == 0
    assert s["goodput_samples_per_s"] == s["fixed_goodput_samples_per_s"]
    assert res.timeline["kind"].tolist() == ["run"]


@pytest.mark.slow
def test_no_fluctuation_through_the_plan_search():
    res = elastic(RAW, [(0, 8), (100, 8)], 200.0, restore_bandwidth=5e9)
    s = res.summary
    assert s["switches"] == 0
    assert s["goodput_samples_per_s"] == pytest.approx(s["fixed_goodput_samples_per_s"], rel=1e-12)


def test_every_switch_is_on_the_timeline_with_its_cost():
    avail = [(0, 16), (600, 8), (1200, 16), (1500, 8)]
    warm = 45.0
    res = elastic(RAW, avail, 2400.0, restore_bandwidth=5e9, warmup_s=warm, choose=chooser(PLANS))
    tl = res.timeline
    switches = tl[tl["kind"] == "switch"]
    assert switches["start_s"].tolist() == [600, 1200, 1500]
    assert (switches["cost_s"] >= warm).all()
    # a switch lasts its cost; training fills the rest of its interval at the level's rate
    assert (switches["end_s"] - switches["start_s"]).tolist() == pytest.approx(
        switches["cost_s"].tolist(), rel=1e-12
    )
    assert tl["start_s"].iloc[1:].tolist() == tl["end_s"].iloc[:-1].tolist()
    assert tl["end_s"].iloc[-1] == 2400.0
    assert res.summary["switch_cost_s"] == pytest.approx(float(switches["cost_s"].sum()), rel=1e-12)
    rates = {g: r for g, (r, _) in res.summary["levels"].items()}
    runs = tl[tl["kind"] == "run"]
    expected = [rates[g] * (e - s) for g, s, e in zip(runs["gpus"], runs["start_s"], runs["end_s"])]
    assert runs["samples"].tolist() == pytest.approx(expected, rel=1e-12)
    assert res.summary["goodput_samples_per_s"] == pytest.approx(sum(expected) / 2400.0, rel=1e-12)
    # growing from dp 4 to dp 8: the 8 new GPUs each receive half the model's state (TP 2);
    # shrinking to GPUs 0-7 keeps every role: nothing moves
    job8 = chooser(PLANS)(RAW, 8, 1).job
    checkpoint = float(rank_checkpoint_bytes(job8).sum())
    assert switches["plan"].tolist() == ["reshard"] * 3
    assert switches["bytes"].tolist() == pytest.approx([0.0, 4 * checkpoint, 0.0], rel=1e-6)
    assert switches["cost_s"].iloc[0] == warm and switches["cost_s"].iloc[1] > warm


def test_a_shrink_that_loses_a_stage_restores_the_checkpoint():
    plans = {**PLANS, **PP2}
    res = elastic(RAW, [(0, 16), (600, 8)], 1200.0, restore_bandwidth=2e9, warmup_s=10, choose=chooser(plans))
    sw = res.timeline[res.timeline["kind"] == "switch"].iloc[0]
    job16 = chooser(plans)(RAW, 16, 1).job
    checkpoint = float(rank_checkpoint_bytes(job16).sum())
    assert sw["plan"] == "restore"
    assert sw["bytes"] == checkpoint
    assert sw["cost_s"] == pytest.approx(checkpoint / 2e9 + 10, rel=1e-12)


def test_deterministic():
    args = (RAW, [(0, 8), (300, 16)], 900.0, 5e9, 5.0)
    a, b = (elastic(*args, choose=chooser(PLANS)) for _ in range(2))
    pd.testing.assert_frame_equal(a.timeline, b.timeline)


def test_availability_file(tmp_path):
    path = tmp_path / "gpus.csv"
    path.write_text("time_s,gpus\n0,16\n60.5,8\n")
    assert read_availability(path) == [(0.0, 16), (60.5, 8)]
    path.write_text("t,gpus\n0,16\n")
    with pytest.raises(ScenarioError, match="header time_s,gpus"):
        read_availability(path)
    path.write_text("time_s,gpus\n0,sixteen\n")
    with pytest.raises(ScenarioError, match="line 2"):
        read_availability(path)


@pytest.mark.parametrize(
    "avail, horizon, bw, field",
    [
        ([(5, 8)], 100.0, 1e9, "availability"),
        ([(0, 8), (10, 16), (10, 8)], 100.0, 1e9, "availability"),
        ([(0, 0)], 100.0, 1e9, "availability"),
        ([], 100.0, 1e9, "availability"),
        ([("soon", 8)], 100.0, 1e9, "availability"),
        ([(0, 8, 1)], 100.0, 1e9, "availability"),
        ([(0, 8), (50, 16)], 50.0, 1e9, "horizon_s"),
        ([(0, 8)], float("inf"), 1e9, "horizon_s"),
        ([(0, 8)], 100.0, 0.0, "restore_bandwidth"),
    ],
)
def test_bad_input_is_refused_naming_the_field(avail, horizon, bw, field):
    with pytest.raises(ScenarioError) as err:
        elastic(RAW, avail, horizon, restore_bandwidth=bw, choose=chooser(PLANS))
    assert err.value.field == field


def test_drawn_availability_is_the_failure_process_timeline():
    """``{"failures": …, "seed": …}`` runs over exactly the seeded failure process's steps;
    with no failure the goodput is the fixed layout's."""
    f = {"mtbf": {"node": 40 * 3600.0}, "repair_time": 3600.0}
    rows = availability_from_failures(RAW, 20 * 3600.0, f, seed=1)
    assert len(rows) > 1
    drawn = elastic(RAW, {"failures": f, "seed": 1}, 20 * 3600.0, 5e9, warmup_s=60, choose=chooser(PLANS))
    given = elastic(RAW, rows, 20 * 3600.0, 5e9, warmup_s=60, choose=chooser(PLANS))
    pd.testing.assert_frame_equal(drawn.timeline, given.timeline)
    assert drawn.summary["switches"] == len(rows) - 1
    none = elastic(RAW, {"failures": {"mtbf": {"gpu": 0}}}, 3600.0, 5e9, choose=chooser(PLANS))
    assert none.summary["goodput_samples_per_s"] == none.summary["fixed_goodput_samples_per_s"]
    with pytest.raises(ScenarioError) as err:
        elastic(RAW, {"failures": f, "sed": 1}, 3600.0, 5e9, choose=chooser(PLANS))
    assert err.value.field == "availability"
