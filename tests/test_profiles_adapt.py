"""A framework profile (``training.framework``) or fidelity preset (``simulation.fidelity``)
never fills in a value the scenario's own fields refuse: it adapts and records its choice
in the resolved scenario's ``adapted`` list; a field the user wrote wins, and a conflict
between written fields is refused naming a written one (clustersim.scenario.adapt)."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.scenario.frameworks import FRAMEWORKS
from clustersim.scenario.loader import apply_overrides, read_yaml
from clustersim.scenario.presets import expand_cluster_preset
from clustersim.scenario.schema import FIDELITY_PRESETS
from clustersim.simulate import checked

ROOT = Path(__file__).resolve().parents[1]
#: the shipped single-job scenarios (a multi-job file's jobs have their own sections)
SHIPPED = sorted(str(p) for p in (ROOT / "scenarios").glob("*.yaml") if "jobs" not in read_yaml(p))
KNOBS = ("cp", "ep", "sequence_parallel", "schedule")


def _shipped_values() -> dict[str, list]:
    """Each knob's values the shipped scenarios use (and its default)."""
    seen = {"cp": {1}, "ep": {1}, "sequence_parallel": {False}, "schedule": {"1f1b"}}
    for path in SHIPPED:
        parallel = read_yaml(path).get("parallel", {})
        for knob in KNOBS:
            if knob in parallel:
                seen[knob].add(parallel[knob])
    return {k: sorted(v, key=str) for k, v in seen.items()}


VALUES = _shipped_values()


def _written(raw: object, prefix: str = "") -> set[str]:
    """Every dotted path the raw scenario states (sections and leaves)."""
    if not isinstance(raw, dict):
        return set()
    out = set()
    for key, value in raw.items():
        out |= {f"{prefix}{key}"} | _written(value, f"{prefix}{key}.")
    return out


def _load(path: str, overrides: dict) -> cs.Scenario:
    """The scenario loaded and checked by its compiler (:func:`clustersim.simulate.checked`)."""
    sc = cs.load_scenario(path, overrides)
    checked(sc)
    return sc


def _adapted(sc) -> dict[str, dict]:
    return {a["field"]: a for a in sc.resolved()["adapted"]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from(SHIPPED),
    framework=st.sampled_from(FRAMEWORKS),
    fidelity=st.sampled_from(sorted(FIDELITY_PRESETS)),
    knobs=st.fixed_dictionaries({k: st.none() | st.sampled_from(VALUES[k]) for k in KNOBS}),
)
def test_loading_never_refuses_a_field_the_user_did_not_write(path, framework, fidelity, knobs):
    """Every framework × fidelity × {cp, ep, sequence parallel, schedule} the shipped
    scenarios use (None: the file's own): loaded and checked by its compiler, it runs or is
    refused naming a field the scenario (with these overrides) states."""
    overrides = {"training.framework": framework, "simulation.fidelity": fidelity}
    overrides |= {f"parallel.{k}": v for k, v in knobs.items() if v is not None}
    written = _written(expand_cluster_preset(apply_overrides(read_yaml(path), overrides)))
    try:
        _load(path, overrides)
    except cs.ScenarioError as e:
        assert e.field in written, str(e)


LLAMA_CP = "scenarios/llama3-70b-128k-cp8.yaml"  # tp 8, cp 8, sequence parallel
QUICKSTART = "scenarios/quickstart.yaml"  # gpt-1.3b, tp 2
DEEPSEEK = "scenarios/deepseek-v3-2048xh800-dualpipe.yaml"  # DualPipe, ep 64


@pytest.mark.parametrize(
    "path,overrides,field,value,by",
    [
        (
            LLAMA_CP,
            {"training.framework": "megatron_core"},
            "parallel.tp_comm_overlap",
            False,
            "training.framework: megatron_core",
        ),
        (
            QUICKSTART,
            {
                "training.framework": "megatron_core",
                "parallel.sequence_parallel": True,
                "simulation.fidelity": "fast",
            },
            "parallel.tp_comm_overlap",
            False,
            "training.framework: megatron_core",
        ),
        (
            LLAMA_CP,
            {"simulation.fidelity": "fast"},
            "simulation.granularity",
            "layer",
            "simulation.fidelity: fast",
        ),
        (
            DEEPSEEK,
            {"training.framework": "megatron_core"},
            "parallel.data_parallel",
            None,
            "training.framework: megatron_core",
        ),
        (
            "scenarios/mixtral-8x7b-64xH100-ep8.yaml",
            {"training.framework": "fsdp2"},
            "parallel.zero",
            0,
            "training.framework: fsdp2",
        ),
    ],
)
def test_the_issues_refusals_now_load_and_record_the_choice(path, overrides, field, value, by):
    """The refusals issue 32 lists (a profile's or preset's own value refused): the scenario
    loads and passes its compiler's check; the value is the adapted one, recorded with who
    chose it and why."""
    sc = _load(path, overrides)
    section, _, name = field.partition(".")
    assert getattr(getattr(sc, section), name) == value
    entry = _adapted(sc)[field]
    assert entry["by"] == by and entry["value"] == value and entry["why"]


def test_a_profile_fills_its_value_where_it_can_run():
    """Adapting is only where the precondition fails: megatron_core + sequence parallel at
    per-layer granularity keeps TP overlap on, with nothing recorded."""
    sc = _load(QUICKSTART, {"training.framework": "megatron_core", "parallel.sequence_parallel": True})
    assert sc.parallel.tp_comm_overlap is True and sc.resolved()["adapted"] == []


def test_the_adapted_record_survives_a_reload():
    sc = _load(LLAMA_CP, {"training.framework": "megatron_core", "simulation.fidelity": "fast"})
    again = cs.load_scenario(sc.resolved())
    assert again.resolved() == sc.resolved()
    assert {"parallel.tp_comm_overlap", "simulation.granularity"} <= set(_adapted(again))


@pytest.mark.parametrize(
    "path,overrides,field",
    [
        (
            LLAMA_CP,
            {"training.framework": "megatron_core", "parallel.tp_comm_overlap": True},
            "parallel.tp_comm_overlap",
        ),
        (
            LLAMA_CP,
            {"simulation.fidelity": "fast", "simulation.granularity": "stage"},
            "simulation.granularity",
        ),
        (
            QUICKSTART,
            {
                "training.framework": "megatron_core",
                "parallel.sequence_parallel": True,
                "parallel.tp_comm_overlap": True,
                "simulation.granularity": "stage",
            },
            "parallel.tp_comm_overlap",
        ),
        (
            "scenarios/mixtral-8x7b-64xH100-ep8.yaml",
            {"training.framework": "fsdp2", "parallel.zero": 3},
            "parallel.zero",
        ),
        (
            DEEPSEEK,
            {"training.framework": "megatron_core", "parallel.data_parallel.overlap_grad_reduce": True},
            "parallel.data_parallel",
        ),
    ],
)
def test_a_conflicting_field_the_user_wrote_is_refused_naming_it(path, overrides, field):
    """A written field wins over every profile and preset; where it cannot run with the
    rest of the scenario, the refusal names it."""
    with pytest.raises(cs.ScenarioError) as e:
        _load(path, overrides)
    assert e.value.field == field


def test_a_default_the_schedule_needs_changed_is_refused_naming_the_schedule():
    """interleaved without parallel.virtual_stages (unstated: 1) is refused on the field the
    user wrote, parallel.schedule, saying which field to state."""
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(QUICKSTART, {"parallel.schedule": "interleaved"})
    assert e.value.field == "parallel.schedule" and "parallel.virtual_stages unstated: 1" in str(e.value)
