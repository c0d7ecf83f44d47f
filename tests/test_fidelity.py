"""``simulation.fidelity`` (issue 21, item 1): each preset sets network, collective model,
granularity and folding together, a field the scenario states wins, and ``exact`` is
today's defaults. The balanced targets (GPT-3 175B on 1,024 A100, GPT 7.5B on 64 H100)
finish in under a minute and follow the packet model's response to oversubscription
(slow: the packet reference takes many minutes; numbers in docs/fidelity.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import clustersim as cs
from clustersim.resolve import resolve
from clustersim.resolve.estimate import estimate
from clustersim.scenario.schema import FIDELITY_PRESETS, SimulationSpec

ROOT = Path(__file__).resolve().parent.parent
SYNTH = ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml"
GPT3 = ROOT / "scenarios" / "gpt3-175b-1024xa100-balanced.yaml"
GPT7 = ROOT / "scenarios" / "gpt-7.5b-64xh100-balanced.yaml"


@pytest.mark.parametrize("name", list(FIDELITY_PRESETS))
def test_a_preset_sets_its_fields(name):
    sim = SimulationSpec(fidelity=name)
    assert {key: getattr(sim, key) for key in FIDELITY_PRESETS[name]} == FIDELITY_PRESETS[name]


def test_the_presets_are_what_docs_say():
    assert FIDELITY_PRESETS["balanced"]["network"] == "flow"
    assert FIDELITY_PRESETS["fast"] == {
        "network": "analytical",
        "collective_model": "analytical",
        "granularity": "stage",
        "fold": "auto",
    }


def test_exact_is_todays_defaults():
    defaults = {name: info.default for name, info in SimulationSpec.model_fields.items()}
    assert all(defaults[key] == value for key, value in FIDELITY_PRESETS["exact"].items())
    assert SimulationSpec() == SimulationSpec(fidelity="exact")


def test_a_stated_field_wins_over_the_preset():
    sim = SimulationSpec(fidelity="fast", network="packet", fold=False)
    assert (sim.network, sim.collective_model, sim.granularity, sim.fold) == (
        "packet",
        "analytical",
        "stage",
        False,
    )


def test_an_unknown_preset_names_the_field():
    with pytest.raises(cs.ScenarioError, match="simulation.fidelity: 'quick' is invalid"):
        cs.load_scenario(SYNTH).with_overrides({"simulation.fidelity": "quick"})


def test_fast_on_a_real_run_equals_its_fields_stated_one_by_one():
    raw = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    del raw["simulation"]["network"]  # (stated, it would win over the preset)
    sc = cs.load_scenario(raw)
    by_preset = cs.simulate(sc.with_overrides({"simulation.fidelity": "fast"}), progress=False)
    by_hand = cs.simulate(
        sc.with_overrides(
            {
                "simulation.network": "analytical",
                "simulation.collective_model": "analytical",
                "simulation.granularity": "stage",
            }
        ),
        progress=False,
    )
    assert by_preset.summary["iteration_time_s"] == by_hand.summary["iteration_time_s"]
    assert by_preset.summary["evaluator"].startswith("dag")


def _iteration(sc, oversubscription: float, **sim) -> float:
    """The iteration time at ``oversubscription``; the estimate of its events checked on the way."""
    sc = sc.with_overrides(
        {
            "cluster.topology.oversubscription": oversubscription,
            **{f"simulation.{k}": v for k, v in sim.items()},
        }
    )
    res = cs.simulate(sc, progress=False)
    assert 0.5 <= estimate(resolve(sc)).events / res.summary["sim_events"] <= 2
    return res.summary["iteration_time_s"]


@pytest.mark.slow
def test_balanced_sees_oversubscription_as_packet_does():
    """The GPT 7.5B balanced scenario cut to 8 sequences per replica (the packet reference in
    minutes, not hours; the full runs and their wall times: benchmarks/fidelity.py): within
    2 % of packet at each oversubscription, its growth over 1:1 within a quarter of packet's
    (+ 0.1 % of the 1:1 time), and fast not moving at all."""
    sc = cs.load_scenario(GPT7).with_overrides({"training.global_batch": 64})
    balanced = {o: _iteration(sc, o) for o in (1, 2, 4)}
    packet = {o: _iteration(sc, o, fidelity="exact", granularity="stage") for o in (1, 2, 4)}
    fast = {o: _iteration(sc, o, fidelity="fast") for o in (1, 4)}
    assert fast[1] == fast[4]
    for o in (1, 2, 4):  # 2 % at this size (the full 64-sequence runs agree within 0.3 %)
        assert balanced[o] == pytest.approx(packet[o], rel=0.02)
    for o in (2, 4):
        grow_b, grow_p = balanced[o] - balanced[1], packet[o] - packet[1]
        assert grow_p > 0 and abs(grow_b - grow_p) <= 0.25 * grow_p + 1e-3 * packet[1]
