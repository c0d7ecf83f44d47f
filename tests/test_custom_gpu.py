"""A GPU outside the catalog, described in the scenario (``cluster.gpu: {name, …}``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import clustersim as cs
from clustersim.hardware.gpus import get_gpu

ROOT = Path(__file__).resolve().parents[1]
A100 = get_gpu("A100-SXM4-80GB")


def _quickstart(**gpu) -> dict:
    raw = yaml.safe_load((ROOT / "scenarios/quickstart.yaml").read_text())
    raw["training"]["global_batch"] = 16
    raw["cluster"]["gpu"] = gpu
    return raw


def _a100_twin(**change) -> dict:
    return {
        "name": "MyGPU",
        "peak_flops": A100.peak_flops,
        "hbm_bandwidth": A100.hbm_bandwidth,
        "memory": A100.memory_bytes,
        "like": "A100-SXM4-80GB",
        **change,
    }


def test_a_custom_twin_of_a_catalog_gpu_gives_its_results():
    twin = cs.simulate(_quickstart(**_a100_twin()), progress=False)
    raw = _quickstart()
    raw["cluster"]["gpu"] = "A100-SXM4-80GB"
    ref = cs.simulate(raw, progress=False)
    for key in ("iteration_time_s", "tflops_per_gpu", "mfu", "peak_memory_gib", "bubble_fraction"):
        assert twin.summary[key] == ref.summary[key], key
    assert set(twin.devices["gpu"]) == {"MyGPU"}


def test_its_numbers_are_the_ones_the_run_uses():
    gpu = _a100_twin(memory="8 GiB", peak_flops=2 * A100.peak_flops)
    res = cs.simulate(_quickstart(**gpu), progress=False)
    assert (res.devices["memory_capacity_bytes"] == 8 * 2**30).all()
    assert res.summary["oom"] is True  # GPT-1.3B's states do not fit 8 GiB
    # MFU divides by the custom peak: the same model FLOPs per second over twice the peak
    ref = cs.simulate(_quickstart(**_a100_twin()), progress=False)
    rate = res.summary["mfu"] * 2 * res.summary["iteration_time_s"]
    assert rate == pytest.approx(ref.summary["mfu"] * ref.summary["iteration_time_s"], rel=1e-12)
    assert res.summary["iteration_time_s"] < ref.summary["iteration_time_s"]


def test_the_resolved_scenario_loads_back():
    sc = cs.load_scenario(_quickstart(**_a100_twin()))
    again = cs.load_scenario(sc.resolved())
    assert again.cluster.gpu == "MyGPU" and again.cluster.custom_gpu == sc.cluster.custom_gpu


def test_sms_give_the_overlap_slowdown_default():
    raw = _quickstart(**_a100_twin(sms=132))
    raw["training"]["framework"] = "megatron_core"
    assert cs.load_scenario(raw).cluster.comm_compute_slowdown == pytest.approx(132 / (132 - 16))


@pytest.mark.parametrize(
    "gpu,match",
    [
        (_a100_twin(name="H100-SXM5-80GB"), r"cluster.custom_gpu.name.*is a catalog GPU"),
        ({"name": "X", "hbm_bandwidth": "2 TB/s", "memory": "80 GiB"}, r"cluster.custom_gpu.peak_flops"),
        (_a100_twin(like="B300"), r"cluster.custom_gpu.like.*not a known GPU"),
        (_a100_twin(peak_flops="5 GB/s"), r"cluster.custom_gpu.peak_flops"),
    ],
)
def test_bad_custom_gpus_are_named(gpu, match):
    with pytest.raises(cs.ScenarioError, match=match):
        cs.load_scenario(_quickstart(**gpu))


def test_unknown_name_suggests_describing_one():
    raw = _quickstart()
    raw["cluster"]["gpu"] = "B300"
    with pytest.raises(
        cs.ScenarioError, match=r"^cluster.gpu: 'B300' is invalid; not a known GPU.*describe one"
    ):
        cs.load_scenario(raw)


def test_fp8_needs_a_calibrated_gpu():
    raw = _quickstart(**_a100_twin())
    raw["training"]["precision"] = "fp8"
    with pytest.raises(
        cs.ScenarioError, match=r"^training.precision: 'fp8' is invalid; the custom GPU 'MyGPU'"
    ):
        cs.simulate(raw, progress=False)
