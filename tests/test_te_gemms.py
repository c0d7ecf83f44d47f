"""Transformer Engine's published GEMM benchmark (B300 SXM6 AC, H200 NVL) against the
calibrated model: every kernel-only pass sum within its stated bound, H200 NVL priced as
H100's fractions on its own 600 W datasheet peaks, B300 on its own MAMF maxima, and both
tables in ``clustersim validate`` with their pass/fail lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.hardware.datasheets import datasheet
from clustersim.validation.te_gemms import GEMM_BOUND, PASSES, gemm_rows, te_gemm_tables
from clustersim.workload.calibration import calibration, calibration_status, gemm_seconds

NVL, SXM, B300, B200 = "H200-NVL-141GB", "H200-SXM-141GB", "B300-SXM-288GB", "B200-SXM-180GB"


@pytest.mark.parametrize("row", gemm_rows(), ids=lambda r: f"{r.gpu}-{r.what}")
def test_each_pass_of_four_gemms_is_within_the_bound(row):
    assert abs(row.model_ms / row.measured_ms - 1) <= GEMM_BOUND


def test_every_gpu_and_pass_of_the_table_is_compared():
    rows = gemm_rows()
    # BF16 in both modes and FP8 current scaling pre-quantized, 3 passes, 2 GPUs
    assert len(rows) == 2 * 3 * 3
    assert {r.what.split()[-1] for r in rows} == set(PASSES)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_h200_nvl_is_h200_sxm_on_its_own_peaks(dtype):
    # same GH100 constants: a compute-bound GEMM's time less the launch scales by the peaks
    nvl, sxm = calibration(NVL), calibration(SXM)
    e_nvl, e_sxm = (c.fp8 if dtype == "fp8" else c.dense16 for c in (nvl, sxm))
    m = n = k = 16384
    t_nvl = gemm_seconds(NVL, e_nvl, m, n, k, dtype) - e_nvl.launch_s
    t_sxm = gemm_seconds(SXM, e_sxm, m, n, k, dtype) - e_sxm.launch_s
    peak = "fp8_flops" if dtype == "fp8" else "dense16_flops"
    assert t_nvl / t_sxm == pytest.approx(
        getattr(datasheet(SXM), peak) / getattr(datasheet(NVL), peak), rel=1e-12
    )
    # the H200 NVL column of NVIDIA's H200 page, halved (its figures are with sparsity)
    assert (datasheet(NVL).dense16_flops, datasheet(NVL).fp8_flops) == (835.5e12, 1670.5e12)


def test_b300_has_its_own_maxima_and_b200s_shape():
    b300, b200 = calibration(B300), calibration(B200)
    for own, donor in ((b300.dense16, b200.dense16), (b300.fp8, b200.fp8)):
        assert (own.dim_half, own.k_half, own.launch_s) == (donor.dim_half, donor.k_half, donor.launch_s)
        assert own.matmul_max != donor.matmul_max and own.sms == 160
    # ml-engineering's MAMF table: B300 1769.0 BF16 and 3353.3 FP8 of 2250 / 4500
    assert b300.dense16.matmul_max == pytest.approx(1769.0 / 2250, rel=1e-12)
    assert b300.fp8.matmul_max == pytest.approx(3353.3 / 4500, rel=1e-12)
    assert calibration_status(B300).startswith("calibrated, in part a transfer")


def test_validate_prints_both_tables_with_their_verdicts():
    md = te_gemm_tables()
    assert md.count("**PASS**") + md.count("**FAIL**") == 2
    assert "TE GEMMs" in md and "TE quantize" in md


def test_docs_hold_the_generated_te_tables():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "validation.md").read_text()
    assert te_gemm_tables() in doc
