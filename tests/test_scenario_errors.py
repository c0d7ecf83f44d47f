"""Bad scenarios raise one clear ScenarioError naming the field, the value and what is accepted."""

import copy
import subprocess
import sys

import pytest
import yaml

import clustersim as cs
from clustersim.hardware.gpus import GPUS
from clustersim.network.factory import network_model_names
from clustersim.schedules import SCHEDULES
from tests.conftest import synthetic

BASE = synthetic(4, 8)


def _error(overrides: dict, base: dict = BASE) -> str:
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario(base).with_overrides(overrides)
    return str(e.value)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            {"parallel.schedule": "gpip"},
            f"parallel.schedule: 'gpip' is invalid; not a known schedule; known: {', '.join(sorted(SCHEDULES))}",
        ),
        (
            {"cluster.gpu": "A200"},
            f"cluster.gpu: 'A200' is invalid; not a known GPU; known: {', '.join(sorted(GPUS))}",
        ),
        (
            {"model.forward": "-1 ms"},
            "model.forward: '-1 ms' is invalid; Input should be greater than or equal to 0",
        ),
        ({"model.backward": "5 GB"}, "model.backward: '5 GB' is invalid; expected a time such as 1.5 ms"),
        (
            {"cluster.intra_node.bandwidth": "10 ms"},
            "cluster.intra_node.bandwidth: '10 ms' is invalid; expected a rate such as 200 Gbit/s",
        ),
        (
            {"cluster.intra_node.bandwidth": 0},
            "cluster.intra_node.bandwidth: 0 is invalid; Input should be greater than 0",
        ),
        ({"model.activation": "lots"}, "model.activation: 'lots' is invalid; expected a size such as 16 MiB"),
        (
            {"cluster.nic.speed": 2},
            "cluster.nic.speed: 2 is invalid; unknown field; accepted fields here: bandwidth, efficiency, latency, per_node",
        ),
        ({"parallel.dp": "many"}, "parallel.dp: 'many' is invalid; expected a whole number ≥ 1 or 'auto'"),
        ({"parallel.dp": 0}, "parallel.dp: 0 is invalid; expected a whole number ≥ 1 or 'auto'"),
        (
            {"simulation.granularity": "op"},
            "simulation.granularity: 'op' is invalid; Input should be 'layer' or 'stage'",
        ),
        (
            {"simulation.network": "wifi"},
            f"simulation.network: 'wifi' is invalid; not a known network model; known: {', '.join(network_model_names())}",
        ),
        (
            {"parallel.pp": 3},
            "parallel: 'tp=1 pp=3 dp=1' is invalid; tp × pp × dp must equal the cluster's 4 GPUs",
        ),
        (
            {"parallel.tp": 2, "parallel.pp": 2},
            "parallel.tp: 2 is invalid; a synthetic model has per-GPU layer times",
        ),
        (
            {"model.backward_weight": "3 ms"},
            "model.backward_weight: 0.003 is invalid; the weight-gradient part cannot exceed the whole backward",
        ),
        (
            {"cluster.nodes": 2, "cluster.topology": {"kind": "single_node"}, "parallel.pp": 8},
            "cluster.topology.kind: 'single_node' is invalid; a cluster of 2 nodes needs a multi-node topology",
        ),
    ],
)
def test_message(overrides, message):
    assert message in _error(overrides)


def test_unknown_field_lists_the_accepted_ones():
    msg = _error({"parallel.ppp": 2})
    assert msg.startswith("parallel.ppp: 2 is invalid; unknown field; accepted fields here: ")
    accepted = msg.split("accepted fields here: ")[1].split(", ")
    assert accepted == sorted(accepted) and {"dp", "pp", "tp", "schedule", "virtual_stages"} <= set(accepted)


def test_pp_must_divide_layers():
    base = synthetic(3, 6)
    assert "parallel.pp: 3 is invalid; model.layers = 4 must divide evenly" in _error(
        {"model.layers": 4}, base
    )


def test_global_batch_must_split_into_microbatches():
    base = synthetic(2, 4, dp=2)  # 4 GPUs: pp 2 × dp 2
    msg = _error({"training.global_batch": 6, "training.micro_batch": 2}, base)
    assert "training.global_batch: 6 is invalid; must be a multiple of micro_batch × dp = 2 × 2 = 4" in msg


def test_auto_dp_that_does_not_divide():
    base = synthetic(2, 4)
    msg = _error({"cluster.gpus_per_node": 3, "parallel.dp": "auto"}, base)
    assert "parallel.dp: 'auto' is invalid; the job's 3 GPUs do not divide by tp × pp = 1 × 2" in msg


def test_missing_required_field():
    raw = copy.deepcopy(BASE)
    del raw["model"]["layers"]
    with pytest.raises(cs.ScenarioError, match="model.layers: this field is required"):
        cs.load_scenario(raw)


def test_missing_file():
    with pytest.raises(
        cs.ScenarioError, match="scenario: 'nope.yaml' is invalid; expected the path of an existing"
    ):
        cs.load_scenario("nope.yaml")


def test_cli_prints_error_without_traceback(tmp_path):
    raw = copy.deepcopy(BASE)
    raw["parallel"]["schedule"] = "gpip"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    proc = subprocess.run(
        [sys.executable, "-m", "clustersim.cli", "run", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: parallel.schedule: 'gpip' is invalid")
    assert "Traceback" not in proc.stderr


def test_cli_bad_set_option():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clustersim.cli",
            "run",
            "scenarios/synthetic-4stage-1f1b.yaml",
            "--set",
            "parallel.pp",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "expected key=value" in proc.stderr and "Traceback" not in proc.stderr
