"""FP8 GEMMs (Transformer-Engine style): the GEMM on the FP8 peak with its calibrated
efficiency, and the cast / amax kernels in closed form."""

from __future__ import annotations

import pytest

from clustersim.workload.calibration import calibration, gemm_seconds
from clustersim.workload.fp8 import fp8_gemm_time, te_linear_casts

H100 = "H100-SXM5-80GB"


def test_gemm_part_is_the_fp8_roofline_with_fp8_efficiency():
    eff = calibration(H100).fp8
    m, n, k = 8192, 8192, 8192
    t = fp8_gemm_time(H100, m, n, k, [])
    peak = 1978.9e12
    waves = 4096 / (32 * 132)  # 64 × 64 tiles of 128 × 128 in 32 waves of H100's 132 SMs
    frac = eff.matmul_max * (m / (m + eff.dim_half)) ** 2 * k / (k + eff.k_half) * waves
    comp = 2.0 * m * n * k / (peak * frac)
    assert t.gemm_s == pytest.approx(comp + eff.launch_s, rel=1e-12) and t.cast_s == 0.0


def test_fp8_beats_bf16_on_a_large_gemm_by_the_efficiency_ratio():
    cal = calibration(H100)
    m = n = k = 16384
    t8 = fp8_gemm_time(H100, m, n, k, te_linear_casts(m, n, k, "F")).total_s
    t16 = gemm_seconds(H100, cal.dense16, m, n, k, "bf16")
    # compute-bound both ways: the speed-up is 2x the peak times the efficiency ratio, less the cast
    ideal = 2 * cal.fp8.matmul_max / cal.dense16.matmul_max
    assert 1.2 < t16 / t8 < ideal


def test_te_linear_casts_per_phase():
    assert te_linear_casts(8, 4, 2, "F") == [16.0]
    assert te_linear_casts(8, 4, 2, "F", first_microbatch=True) == [16.0, 8.0]
    assert te_linear_casts(8, 4, 2, "B") == [32.0]
    assert te_linear_casts(8, 4, 2, "W") == []


def test_errors_name_the_value_and_what_is_accepted():
    with pytest.raises(ValueError, match="'X': expected F, B or W"):
        te_linear_casts(1, 1, 1, "X")
    with pytest.raises(ValueError, match="A100-SXM4-80GB has no FP8"):
        fp8_gemm_time("A100-SXM4-80GB", 1, 1, 1, [])
