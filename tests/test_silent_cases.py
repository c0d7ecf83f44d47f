"""Inputs that used to run silently as something else now error or warn (issue 21)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

import clustersim as cs
from clustersim.cli import main
from clustersim.errors import ScenarioWarning
from clustersim.scenario.unit_hints import unit_hints
from tests.conftest import synthetic

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p for p in (ROOT / "scenarios").rglob("*.yaml") if "sweeps" not in p.parts)


def _warnings_of(raw) -> list[ScenarioWarning]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cs.load_scenario(raw)
    return [w.message for w in caught if isinstance(w.message, ScenarioWarning)]


def test_interleaved_without_virtual_stages_is_an_error():
    # before: it ran as plain 1F1B under the interleaved name, with 1F1B's numbers
    # virtual_stages unstated: the refusal names the field the user wrote (issue 32)
    with pytest.raises(
        cs.ScenarioError,
        match=r"^parallel.schedule: 'interleaved' is invalid.*use schedule: 1f1b.*virtual_stages unstated",
    ):
        cs.load_scenario(synthetic(4, 8, schedule="interleaved"))
    with pytest.raises(cs.ScenarioError, match=r"^parallel.virtual_stages: 1 is invalid.*use schedule: 1f1b"):
        cs.load_scenario(synthetic(4, 8, schedule="interleaved"), {"parallel.virtual_stages": 1})
    raw = synthetic(4, 8, schedule="interleaved", layers_per_stage=2)
    raw["parallel"]["virtual_stages"] = 2
    cs.load_scenario(raw)  # v = 2 is the schedule


def test_preset_and_hf_config_together_is_an_error():
    raw = yaml.safe_load((ROOT / "scenarios/quickstart.yaml").read_text())
    raw["model"]["hf_config"] = "llama-3-8b"  # before: ignored, the preset won
    with pytest.raises(cs.ScenarioError, match=r"^model.hf_config: 'llama-3-8b' is invalid; model.preset"):
        cs.load_scenario(raw)


@pytest.mark.parametrize(
    "section,key,value,warns",
    [
        ("nic", "bandwidth", 200, "did you mean '200 Gbit/s'"),
        ("nic", "bandwidth", 999_999.0, "did you mean"),
        ("nic", "bandwidth", 1e6, None),  # 1 MB/s: a slow but real link
        ("nic", "bandwidth", "200 B/s", None),  # a unit written: deliberate
        ("nic", "latency", 3, "did you mean '3 us'"),
        ("nic", "latency", 1.0, None),
        ("nic", "latency", "3 s", None),
        ("intra_node", "bandwidth", 25, "did you mean '25 Gbit/s'"),
    ],
)
def test_implausible_bare_quantities_warn_with_the_unit_meant(section, key, value, warns):
    raw = yaml.safe_load((ROOT / "scenarios/quickstart.yaml").read_text())
    raw["cluster"][section] = {**raw["cluster"].get(section, {}), key: value}
    got = _warnings_of(raw)
    if warns is None:
        assert got == []
    else:
        (w,) = got
        assert w.field == f"cluster.{section}.{key}" and warns in str(w)


def test_topology_options_are_covered_too():
    (w,) = unit_hints({"cluster": {"topology": {"kind": "star", "bandwidth": 10}}})
    assert w.field == "cluster.topology.bandwidth"


def test_the_cli_prints_one_warning_line(tmp_path, capsys):
    raw = synthetic(2, 2)
    raw["cluster"]["intra_node"]["bandwidth"] = 300  # meant 300 GB/s
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert err == [
        "warning: cluster.intra_node.bandwidth: 300.0 is read as 300 bytes/s (no unit given); "
        "did you mean '300 Gbit/s' or '300 GB/s'? Write the unit to silence this"
    ]


@pytest.mark.parametrize("schedule", ["zb_h1", "zb_h2"])
def test_zero_bubble_without_a_w_split_warns(schedule):
    (w,) = _warnings_of(synthetic(4, 8, schedule=schedule))
    assert w.field == "model.backward_weight" and "same times as 1f1b" in str(w)
    raw = synthetic(4, 8, schedule=schedule)
    raw["model"]["backward_weight"] = raw["model"]["backward"] / 2
    assert _warnings_of(raw) == []
    assert _warnings_of(synthetic(4, 8, schedule="1f1b")) == []  # nothing to split


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_scenarios_load_without_warnings(path):
    assert _warnings_of(str(path)) == []


def _quickstart(**parallel) -> dict:
    raw = yaml.safe_load((ROOT / "scenarios/quickstart.yaml").read_text())
    raw["training"]["global_batch"] = 16
    raw["parallel"].update(parallel)
    return raw


def test_a_job_may_use_the_first_gpus_of_the_cluster():
    # pp 4 × tp 2 × dp 1 = 8 of the 2-node cluster's 16 GPUs (before: refused) runs as on one node
    part = cs.simulate(_quickstart(dp=1, gpus=8), progress=False)
    one = _quickstart(dp=1)
    one["cluster"]["nodes"] = 1
    whole = cs.simulate(one, progress=False)
    for key in ("iteration_time_s", "tflops_per_gpu", "mfu", "peak_memory_gib", "num_gpus"):
        assert part.summary[key] == whole.summary[key], key
    assert part.summary["num_gpus"] == 8


@pytest.mark.parametrize(
    "parallel,match",
    [
        ({"dp": 1}, r"tp × pp × dp must equal the cluster's 16 GPUs .*set parallel.gpus to use fewer"),
        ({"dp": 1, "gpus": 6}, r"tp × pp × dp must equal the job's 6 GPUs"),
        ({"gpus": 32}, r"^parallel.gpus: 32 is invalid; at most the cluster's 16 GPUs"),
    ],
)
def test_gpu_subset_errors_name_the_field(parallel, match):
    with pytest.raises(cs.ScenarioError, match=match):
        cs.load_scenario(_quickstart(**parallel))


def test_a_sweep_file_given_to_run_names_the_sweep_command(capsys):
    path = ROOT / "scenarios/sweeps/quickstart-pp-schedule.yaml"
    assert main(["run", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: sweep: ") and "run it with `clustersim sweep FILE`" in line


def test_unit_hints_leave_huge_numbers_to_the_field_check():
    # found by the slow fuzz run: an int past float's range under the topology raised
    # OverflowError in the hint pass instead of the field's own error
    raw = yaml.safe_load((ROOT / "scenarios/quickstart.yaml").read_text())
    raw["cluster"]["topology"] = {"kind": 10**400}
    with pytest.raises(cs.ScenarioError, match=r"^cluster.topology.kind: "):
        cs.load_scenario(raw)
    assert unit_hints({"nic": {"bandwidth": 10**400, "latency": 10**400}}) == []
