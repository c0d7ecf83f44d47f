"""The GPU catalog agrees with hardware_specs.csv and names unknown GPUs clearly."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from clustersim.errors import ScenarioError
from clustersim.hardware.gpus import GPUS, get_gpu

DATA = Path(__file__).parent / "data"
ROWS = {
    "A100-SXM4-80GB": "A100 SXM4 80GB",
    "A100-SXM4-40GB": "A100 SXM4 40GB",
    "H100-SXM5-80GB": "H100 SXM5 80GB",
    "H200-SXM-141GB": "H200 SXM 141GB",
    "V100-SXM2-32GB": "V100 SXM2",
}


def first_number(text: str) -> float:
    return float(re.findall(r"[\d.]+", text)[-1 if "/" in text else 0])


@pytest.mark.parametrize("name,row", ROWS.items())
def test_catalog_matches_hardware_specs(name, row):
    with open(DATA / "hardware_specs.csv", newline="") as f:
        spec = next(r for r in csv.DictReader(f) if r["gpu"] == row)
    gpu = get_gpu(name)
    assert gpu.name == name and gpu.source
    assert gpu.memory_bytes == first_number(spec["memory_GB"]) * 1e9
    assert gpu.peak_flops == pytest.approx(first_number(spec["bf16_fp16_dense_tflops"]) * 1e12)
    assert gpu.hbm_bandwidth == pytest.approx(first_number(spec["hbm_bw_GBps"]) * 1e9)


#: edge/inference GPUs, from their datasheets (not in hardware_specs.csv): memory GB, dense FP16 TFLOP/s, GB/s
EDGE = {"T4-16GB": (16, 65, 320)}


@pytest.mark.parametrize("name,spec", EDGE.items())
def test_edge_gpus_match_their_datasheets(name, spec):
    gpu = get_gpu(name)
    assert (gpu.memory_bytes, gpu.peak_flops, gpu.hbm_bandwidth) == pytest.approx(
        (spec[0] * 1e9, spec[1] * 1e12, spec[2] * 1e9)
    )
    assert "datasheet" in gpu.source


def test_catalog_has_exactly_the_listed_gpus():
    assert set(GPUS) == set(ROWS) | set(EDGE)


def test_unknown_gpu_lists_known():
    with pytest.raises(ScenarioError) as info:
        get_gpu("A100")
    assert info.value.field == "cluster.gpu"
    assert "A100-SXM4-80GB" in str(info.value) and "H200-SXM-141GB" in str(info.value)
