"""Adding a GPU is adding a row: a copy of the datasheet table with one invented GPU,
named by ``CLUSTERSIM_GPU_DATASHEETS`` (read when clustersim is imported, hence a fresh
interpreter), and a scenario runs on it, priced as its nearest calibrated GPU's
efficiencies on its own peaks."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustersim.hardware.datasheets import SHIPPED_CSV, datasheet
from tests.test_gpus import tiny

ROOT = Path(__file__).resolve().parents[1]
NEW, TWIN = "Z100-SXM-100GB", "A100-SXM4-80GB"
SPEEDUP = 1.25  # the invented GPU: A100 80GB's row with both peaks 1.25 × as high

#: run in the fresh interpreter: the invented GPU and its twin, on the same tiny scenario
PROBE = """
import json, sys, warnings
import clustersim as cs
from clustersim.cli import main
from clustersim.errors import CalibrationTransfer
from clustersim.workload.calibration import calibrated_as

new, twin, scenario = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = {"donor": calibrated_as(new)}
for gpu in (new, twin):
    scenario["cluster"]["gpu"] = gpu
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = cs.simulate(scenario, progress=False)
    compute = res.spans[res.spans["kind"] == "compute"]
    out[gpu] = {
        "summary": {k: res.summary[k] for k in ("iteration_time_s", "mfu", "tflops_per_gpu", "oom")},
        "capacity": sorted(set(res.devices["memory_capacity_bytes"].tolist())),
        "spans": list(zip(compute["name"], compute["flops"], compute["end_s"] - compute["start_s"])),
        "warnings": [str(w.message) for w in caught if issubclass(w.category, CalibrationTransfer)],
    }
main(["list"])
print("JSON" + json.dumps(out))
"""


def _with_new_row(path: Path) -> None:
    with SHIPPED_CSV.open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows, fields = list(reader), reader.fieldnames
    row = dict(next(r for r in rows if r["gpu"] == TWIN))
    row.update(
        gpu=NEW,
        bf16_fp16_dense_tflops="390",  # 1.25 × 312
        hbm_TBps="2.54875",  # 1.25 × 2.039
        memory_marketed_GB="100",
        memory_usable_bytes=str(100 * 2**30 - 2**28),
        # the twin's SM count: GEMM tiles quantize into the same waves, so every kernel's
        # time scales with the peaks alone
        sms="108",
        sms_source="invented for tests/test_gpu_catalog_row.py: 108 SMs",
        spec_source="invented for tests/test_gpu_catalog_row.py",
        memory_usable_source="invented",
    )
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows([*rows, row])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    table = tmp_path_factory.mktemp("catalog") / "gpus.csv"
    _with_new_row(table)
    env = {**os.environ, "CLUSTERSIM_GPU_DATASHEETS": str(table), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, NEW, TWIN, json.dumps(tiny(NEW))],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    listing, _, data = proc.stdout.partition("JSON")
    return listing, json.loads(data)


def test_the_new_row_is_listed_as_a_transfer_from_its_nearest_calibrated_gpu(run):
    listing, data = run
    assert data["donor"] == TWIN
    (line,) = [x for x in listing.splitlines() if x.strip().startswith(NEW)]
    assert line.endswith(f"; transfer from {TWIN}") and "390 TFLOP/s" in line
    (warning,) = set(data[NEW]["warnings"])
    assert NEW in warning and f"priced with {TWIN}'s efficiencies" in warning
    assert data[TWIN]["warnings"] == []


def test_a_scenario_runs_on_the_new_row_at_its_own_peaks(run):
    _, data = run
    new, twin = data[NEW], data[TWIN]
    assert new["capacity"] == [100 * 2**30 - 2**28] and not new["summary"]["oom"]
    # the twin's efficiency fractions on 1.25 × both peaks: every pass's kernels are 1.25 ×
    # shorter but for the memory-bound kernels' ramp (the first loads' latency); launches and
    # framework overheads do not scale (a launch op's wait for the host grows as the kernels
    # shrink: tests/test_host.py); the optimizer and grad
    # norm (memory-bound kernels, each with its launch inside) fall in between
    assert len(new["spans"]) == len(twin["spans"])
    for (name, flops, t_new), (name_twin, _, t_twin) in zip(new["spans"], twin["spans"]):
        assert name == name_twin
        if flops:  # its GEMMs exactly, its memory-bound kernels but their ramp (a latency, kept)
            assert 1 < t_twin / t_new <= SPEEDUP * (1 + 1e-9), name
        elif name.startswith("framework"):
            assert t_new == pytest.approx(t_twin, rel=1e-12), name
        elif name.startswith("launch"):  # the same launches; shorter kernels wait longer for the host
            assert t_new >= t_twin * (1 - 1e-12), name  # equal where both wait for every issue
        else:
            assert 1 < t_twin / t_new < SPEEDUP, name
    # so the iteration is faster, but by less than the peaks (communication does not scale)
    assert twin["summary"]["iteration_time_s"] / SPEEDUP < new["summary"]["iteration_time_s"]
    assert new["summary"]["iteration_time_s"] < twin["summary"]["iteration_time_s"]
    # MFU divides by the new row's peak
    for res, peak in ((new, SPEEDUP * datasheet(TWIN).dense16_flops), (twin, datasheet(TWIN).dense16_flops)):
        assert res["summary"]["mfu"] == pytest.approx(
            res["summary"]["tflops_per_gpu"] * 1e12 / peak, rel=1e-12
        )


def test_a_bad_cell_names_the_table_row_and_column(tmp_path):
    table = tmp_path / "gpus.csv"
    _with_new_row(table)
    table.write_text(table.read_text().replace(f"{NEW},390,", f"{NEW},390 TFLOP/s,"))
    from clustersim.errors import ScenarioError
    from clustersim.hardware.datasheets import read_datasheets

    with pytest.raises(
        ScenarioError, match=rf"gpus.csv row '{NEW}', column bf16_fp16_dense_tflops: '390 TFLOP/s'"
    ):
        read_datasheets(table)
