"""Numbers within documented ranges, cross-field rules at load time, and a link down for
ever as a named stall (issue 18, item 2 — the parts that need no resolved Job)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.scenario.loader import read_yaml
from clustersim.scenario.multi_job import MultiJobSpec
from clustersim.scenario.queue import QueueSpec
from clustersim.scenario.schema import field_ranges
from tests.conftest import synthetic
from tests.test_engine_fabric import _two_node_pipeline

ROOT = Path(__file__).resolve().parent.parent
HAP = ROOT / "scenarios" / "hap-mixed-a100-v100.yaml"
VGG = ROOT / "scenarios" / "pipedream-vgg16-16xV100-10GbE.yaml"


def _error(overrides: dict, raw: dict | None = None) -> str:
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(raw or synthetic(4, 8)).with_overrides(overrides)
    return str(e.value)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            {"simulation.iterations": 2**64 + 1},
            "simulation.iterations: 18446744073709551617 is invalid; expected a value from 1 to 100,000",
        ),
        (
            {"simulation.chunk_size": 1},
            "simulation.chunk_size: 1 is invalid; expected a value from 4,096 to 1,099,511,627,776",
        ),
        (
            {"simulation.chunk_size": "1 KiB"},
            "simulation.chunk_size: '1 KiB' is invalid; expected a value from 4,096",
        ),
        (
            {"simulation.compute_noise": {"sigma": 1e9}},
            "simulation.compute_noise.sigma: 1000000000.0 is invalid; expected a value from 0 to 5",
        ),
        (
            {"simulation.compute_noise": {"sigma": float("nan")}},
            "simulation.compute_noise.sigma: nan is invalid; Input should be a finite number",
        ),
        (
            {"cluster.node_groups": [{"nodes": 4, "speed": 2**64 + 1}]},
            "cluster.node_groups[0].speed: 18446744073709551617 is invalid; expected a value above 0 and at most 1,000",
        ),
        (
            {"cluster.gpus_per_node": 0},
            "cluster.gpus_per_node: 0 is invalid; expected a value from 1 to 1,024",
        ),
        ({"model.layers": 10**6}, "model.layers: 1000000 is invalid; expected a value from 1 to 100,000"),
        (
            {"simulation.seed": -1},
            "simulation.seed: -1 is invalid; expected a value from 0 to 18,446,744,073,709,551,615",
        ),
    ],
)
def test_out_of_range_numbers_name_field_value_and_range(overrides, message):
    assert message in _error(overrides)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            {"model.image_size": 1_000_000},
            "model.image_size: 1000000 is invalid; expected a value from 32 to 8,192",
        ),
        ({"model.classes": 0}, "model.classes: 0 is invalid; expected a value from 1 to 1,000,000"),
    ],
)
def test_cnn_ranges(overrides, message):
    assert message in _error(overrides, read_yaml(VGG))


def test_transformer_vocab_range():
    raw = read_yaml(ROOT / "scenarios" / "quickstart.yaml")
    assert "model.vocab: 1000000000 is invalid; expected a value from 1 to 10,000,000" in _error(
        {"model.vocab": 10**9}, raw
    )


def test_every_range_is_documented():
    doc = (ROOT / "docs" / "limits.md").read_text()
    table = dict(re.findall(r"^\| `([^`]+)` \| (.+?) \|$", doc, flags=re.M))
    # a multi-job scenario adds jobs[].…, a queue scheduler.… and jobs[].… of its own
    ranges = {**field_ranges(), **field_ranges(MultiJobSpec), **field_ranges(QueueSpec)}
    assert table == {path: str(rng) for path, rng in ranges.items()}
    assert len(table) >= 40


def test_shipped_scenarios_are_within_range():
    for path in sorted((ROOT / "scenarios").rglob("*.yaml")):
        raw = read_yaml(path)
        if "sweep" not in raw:
            cs.load_scenario(raw)


def test_nics_beyond_gpus_per_node_are_refused_at_load():
    assert _error({"cluster.nic.per_node": 8}) == (
        "cluster.nic.per_node: 8 is invalid; at most gpus_per_node (4) NICs per node"
    )


def test_speed_split_with_interleaved_is_refused_at_load():
    message = _error(
        {
            "parallel.dp_split": "speed",
            "parallel.schedule": "interleaved",
            "parallel.virtual_stages": 2,
            "parallel.tp": 4,
            "parallel.pp": 2,
        },
        read_yaml(HAP),
    )
    assert message.startswith(
        "parallel.dp_split: 'speed' is invalid; speed picks each replica's micro-batch count, "
        "but schedule 'interleaved' takes only some counts (Megatron's interleaved schedule needs"
    )


@pytest.mark.parametrize(
    "network,where",
    [
        ("packet", "link node0.nic0->leaf0 is down for ever"),
        ("analytical", "link node0.nic0->leaf0 (on the route gpu0 → gpu1) is down for ever"),
        ("flow", "link node0.nic0->leaf0 is down for ever"),
    ],
)
def test_a_link_down_for_ever_is_a_named_stall(network, where):
    raw = _two_node_pipeline(network)
    raw["cluster"]["link_degradations"] = [{"between": ["node0.nic0", "leaf0"], "start": "1 ms", "factor": 0}]
    with pytest.raises(cs.SimulationStall) as e:
        cs.simulate(cs.load_scenario(raw), progress=False)
    assert str(e.value).startswith(where)
    assert "give the window an end, or list the cable in cluster.failed_links" in str(e.value)


def test_a_window_without_end_that_only_slows_is_finite():
    """factor 1/2 for ever from t = 0: the 16 MiB activation crosses the NIC link at half
    its bandwidth, so the run is slower than undegraded but finite."""
    raw = _two_node_pipeline("analytical")
    fast = cs.simulate(cs.load_scenario(raw), progress=False).summary["iteration_time_s"]
    raw["cluster"]["link_degradations"] = [{"between": ["node0.nic0", "leaf0"], "start": 0, "factor": 0.5}]
    slow = cs.simulate(cs.load_scenario(raw), progress=False).summary["iteration_time_s"]
    nic = 100e9 / 8
    # the forward activation and the backward gradient each take S/(B/2) instead of S/B
    assert slow - fast == pytest.approx(2 * 16 * 2**20 / nic, rel=1e-9)


@pytest.mark.parametrize("field", ["model.params", "model.activation"])
def test_synthetic_bytes_per_layer_are_bounded(field):
    """1e308 bytes per layer once overflowed to inf when summed over a stage (the fuzz run's
    OverflowError in chunk_costs)."""
    raw = read_yaml(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml")
    assert f"{field}: 1e+308 is invalid; expected a value from 0 to 1,125,899,906,842,624" in _error(
        {field: 1e308}, raw
    )
