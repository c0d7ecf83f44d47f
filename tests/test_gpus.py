"""The GPU catalog is the datasheet table: every row loads, holds plausible numbers in the
stated units, is calibrated or says whose efficiencies it borrows, and runs a scenario.

Tests iterate the table's rows, never name its GPUs, so adding a GPU is adding a row
(tests/test_gpu_catalog_row.py adds one to a copy of the table and runs it)."""

from __future__ import annotations

import csv
import re
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.errors import CalibrationTransfer, ScenarioError
from clustersim.hardware.datasheets import SHIPPED_CSV, datasheet, datasheets, read_datasheets
from clustersim.hardware.gpus import GPUS, get_gpu
from clustersim.hardware.interference import COMM_SMS, default_slowdown, slowdown_of
from clustersim.workload.calibration import calibrated_as, calibrated_gpus, calibration_status, measurements
from clustersim.workload.cost_model import attention_curves_for, efficiency_for

DATA = Path(__file__).parent / "data"
ROWS = list(datasheets())


def _transfer(gpu: str) -> bool:
    return calibrated_as(gpu) != gpu


def test_the_catalog_is_the_table_in_its_order():
    assert list(GPUS) == ROWS == list(read_datasheets(SHIPPED_CSV))


@pytest.mark.parametrize("name", ROWS)
def test_every_row_loads_into_the_catalog(name):
    gpu, sheet = get_gpu(name), datasheet(name)
    assert (gpu.peak_flops, gpu.hbm_bandwidth, gpu.memory_bytes) == (
        sheet.dense16_flops,
        sheet.hbm_bandwidth,
        sheet.memory_usable_bytes or sheet.memory_marketed_bytes,
    )
    assert gpu.source == sheet.spec_source and sheet.verification
    # the description is the numbers, rounded
    assert f"{sheet.dense16_flops / 1e12:.0f} TFLOP/s" in gpu.description


@pytest.mark.parametrize("name", ROWS)
def test_every_row_is_in_the_stated_units(name):
    s = datasheet(name)
    # a column in the wrong unit is off by 10³ or more: each number sits within a factor of
    # ~10 of today's accelerators (T4 to GB200)
    assert 1e13 <= s.dense16_flops <= 1e16 and 1e11 <= s.hbm_bandwidth <= 1e14
    assert 2**33 <= s.memory_marketed_bytes <= 2**41 and 1e9 <= s.scale_up_bandwidth <= 1e13
    # ridge point (FLOP per HBM byte) of a dense tensor unit: 100-500 from V100 to B200
    assert 50 <= s.dense16_flops / s.hbm_bandwidth <= 1000
    # the scale-up link is slower than the GPU's own memory
    assert s.scale_up_bandwidth < s.hbm_bandwidth
    assert COMM_SMS < s.sms <= 1000 and str(s.sms) in s.sms_source


@pytest.mark.parametrize("name", [n for n in ROWS if datasheet(n).memory_usable_bytes])
def test_usable_memory_is_the_driver_total_near_the_marketed_binary_capacity(name):
    sheet = datasheet(name)
    assert sheet.memory_source
    # vendors' "80 GB" is binary capacity: the driver reports the marketed number in GiB, less
    # a small reservation (H100: 81559 of 81920 MiB; B200: 183359 of 184320 MiB)
    marketed_gib = sheet.memory_marketed_bytes / 1e9
    assert 0.99 * marketed_gib * 2**30 <= sheet.memory_usable_bytes <= marketed_gib * 2**30


@pytest.mark.parametrize("name", [n for n in ROWS if datasheet(n).fp8_flops])
def test_fp8_peak_is_twice_the_dense16_peak_where_fp8_exists(name):
    s = datasheet(name)
    assert s.fp8_flops == pytest.approx(2 * s.dense16_flops, rel=1e-3)


@pytest.mark.parametrize("name", ROWS)
def test_every_row_has_the_sm_share_slowdown(name):
    sms = datasheet(name).sms
    assert (
        default_slowdown(name)
        == slowdown_of(sms)
        == pytest.approx(1 + COMM_SMS / (sms - COMM_SMS), rel=1e-15)
    )


def _hardware_specs_row(name: str) -> dict | None:
    """The row of tests/data/hardware_specs.csv (an independent copy of the sources) that
    names catalog GPU ``name`` ("A100 SXM4 80GB" for A100-SXM4-80GB; "V100 SXM2" for both
    memory sizes), or None."""
    words = name.replace("-", " ")
    with open(DATA / "hardware_specs.csv", newline="") as f:
        return next(
            (r for r in csv.DictReader(f) if words == r["gpu"] or words.startswith(r["gpu"] + " ")), None
        )


def _first_number(text: str) -> float:
    return float(re.findall(r"[\d.]+", text)[-1 if "/" in text else 0])


@pytest.mark.parametrize("name", [n for n in ROWS if _hardware_specs_row(n)])
def test_rows_agree_with_the_independent_spec_table(name):
    spec, gpu = _hardware_specs_row(name), get_gpu(name)
    assert gpu.peak_flops == pytest.approx(_first_number(spec["bf16_fp16_dense_tflops"]) * 1e12)
    assert gpu.hbm_bandwidth == pytest.approx(_first_number(spec["hbm_bw_GBps"]) * 1e9)
    marketed = _first_number(spec["memory_GB"])
    assert 0.99 * marketed * 1e9 <= gpu.memory_bytes <= marketed * 2**30


@pytest.mark.parametrize("name", ROWS)
def test_every_row_is_calibrated_or_says_whose_efficiencies_it_borrows(name):
    donor = calibrated_as(name)
    assert donor in calibrated_gpus()
    if not _transfer(name):
        assert calibration_status(name).startswith("calibrated")  # (a plan may borrow parts: its note)
        assert "transfer" not in efficiency_for(name).source
        return
    # a transfer: no measurements of its own set it; the donor's fractions, said so
    assert "calibrate" not in {r.role for r in measurements() if r.gpu == name}
    assert calibration_status(name) == f"transfer from {donor}"
    with pytest.warns(CalibrationTransfer, match=f"priced with {donor}'s efficiencies"):
        eff = efficiency_for(name)
    # the donor's constants, wave quantization over this GPU's own SMs
    assert eff.sms == datasheet(name).sms
    assert replace(eff, sms=0, source="") == replace(efficiency_for(donor), sms=0, source="")
    assert f"{name} (transfer)" in eff.source
    assert attention_curves_for(name) == attention_curves_for(donor)


@pytest.mark.parametrize("name", [n for n in ROWS if _transfer(n)])
def test_a_transfer_borrows_from_a_nearest_calibrated_row(name):
    own, donor = datasheet(name), datasheet(calibrated_as(name))

    def gaps(s):
        return abs(s.dense16_flops - own.dense16_flops), abs(s.hbm_bandwidth - own.hbm_bandwidth)

    # whatever the distance's weights, no calibrated row is nearer in both peaks at once
    for other in calibrated_gpus():
        peak_gap, hbm_gap = gaps(datasheet(other))
        assert not (peak_gap < gaps(donor)[0] and hbm_gap < gaps(donor)[1]), other


def tiny(gpu: str) -> dict:
    """A two-stage GPT on two GPUs of type ``gpu`` (analytical network: a few ms)."""
    return {
        "name": f"tiny-{gpu}",
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu": gpu},
        "model": {"preset": "gpt-1.3b", "seq_len": 256, "layers": 4},
        "training": {"global_batch": 4, "micro_batch": 1},
        "parallel": {"pp": 2, "dp": 1},
        "simulation": {"network": "analytical"},
    }


@pytest.mark.parametrize("name", ROWS)
def test_every_row_runs_a_scenario_on_its_own_numbers(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationTransfer)
        res = cs.simulate(tiny(name), progress=False)
    gpu = get_gpu(name)
    assert (res.devices["memory_capacity_bytes"] == gpu.memory_bytes).all()
    assert res.summary["mfu"] == pytest.approx(
        res.summary["tflops_per_gpu"] * 1e12 / gpu.peak_flops, rel=1e-12
    )
    assert 0 < res.summary["mfu"] < 1 and not res.summary["oom"]


def test_unknown_datasheet_names_the_field():
    with pytest.raises(ScenarioError) as info:
        datasheet("A100")
    assert info.value.field == "cluster.gpu" and ROWS[-1] in str(info.value)


def test_unknown_gpu_lists_known():
    with pytest.raises(ScenarioError) as info:
        get_gpu("A100")
    assert info.value.field == "cluster.gpu"
    assert all(name in str(info.value) for name in ROWS)
