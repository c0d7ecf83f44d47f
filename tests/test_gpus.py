"""The GPU catalog agrees with hardware_specs.csv and names unknown GPUs clearly."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from clustersim.errors import ScenarioError
from clustersim.hardware.datasheets import datasheet, datasheets
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
    # the ledger holds the driver-reported total (the marketed GB in GiB, less at most 1 %)
    # where one is recorded, else the marketed decimal figure
    marketed = first_number(spec["memory_GB"])
    if datasheet(name).memory_usable_bytes:
        assert 0.99 * marketed * 2**30 <= gpu.memory_bytes <= marketed * 2**30
    else:
        assert gpu.memory_bytes == marketed * 1e9
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


#: catalog GPUs sourced only from gpu_datasheets.csv (Hopper variants, Blackwell, CDNA3)
DATASHEET_ONLY = {"H800-SXM5-80GB", "B200-SXM-180GB", "GB200-186GB", "MI300X-192GB"}


def test_catalog_has_exactly_the_listed_gpus():
    assert set(GPUS) == set(ROWS) | set(EDGE) | DATASHEET_ONLY
    assert set(datasheets()) == set(GPUS)


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_catalog_gpu_matches_its_datasheet_row(name):
    gpu, sheet = get_gpu(name), datasheet(name)
    assert gpu.source and sheet.spec_source and sheet.verification
    assert gpu.peak_flops == pytest.approx(sheet.dense16_flops, rel=1e-12)
    assert gpu.hbm_bandwidth == pytest.approx(sheet.hbm_bandwidth, rel=1e-12)
    # the ledger holds the driver-reported total where recorded (see hardware/datasheets.py)
    assert gpu.memory_bytes == (sheet.memory_usable_bytes or sheet.memory_marketed_bytes)


@pytest.mark.parametrize("name", sorted(n for n in GPUS if datasheet(n).memory_usable_bytes))
def test_usable_memory_is_the_driver_total_near_the_marketed_binary_capacity(name):
    sheet = datasheet(name)
    assert sheet.memory_source
    # vendors' "80 GB" is binary capacity: the driver reports the marketed number in GiB, less
    # a small reservation (H100: 81559 of 81920 MiB; B200: 183359 of 184320 MiB)
    marketed_gib = sheet.memory_marketed_bytes / 1e9
    assert 0.99 * marketed_gib * 2**30 <= sheet.memory_usable_bytes <= marketed_gib * 2**30


def test_fp8_peak_is_twice_the_dense16_peak_where_fp8_exists():
    with_fp8 = [s for s in datasheets().values() if s.fp8_flops]
    assert {s.gpu for s in with_fp8} == {"H100-SXM5-80GB", "H200-SXM-141GB"} | DATASHEET_ONLY
    for s in with_fp8:
        assert s.fp8_flops == pytest.approx(2 * s.dense16_flops, rel=1e-3)


def test_unknown_datasheet_names_the_field():
    with pytest.raises(ScenarioError) as info:
        datasheet("A100")
    assert info.value.field == "cluster.gpu" and "MI300X-192GB" in str(info.value)


def test_unknown_gpu_lists_known():
    with pytest.raises(ScenarioError) as info:
        get_gpu("A100")
    assert info.value.field == "cluster.gpu"
    assert "A100-SXM4-80GB" in str(info.value) and "H200-SXM-141GB" in str(info.value)
