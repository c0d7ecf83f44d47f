"""Where a published step's time goes (clustersim/validation/published_step.py): the nsys
report's per-step split of a Megatron-FSDP Llama-3.1-70B step on 64 × H100 against the model."""

from __future__ import annotations

from clustersim.validation.data import read_table
from clustersim.validation.published_profiles import BAND
from clustersim.validation.published_step import host_share, measured, model_split, outside_kernels_ms


def test_gemms_a_step_lie_between_alone_and_beside_nccl():
    m, p = measured(), model_split()
    assert p["gemm_beside"] > p["gemm"]
    assert BAND[0] * p["gemm"] <= m["gemm"] <= BAND[1] * p["gemm_beside"]


def test_no_time_outside_kernels_in_the_step_nor_in_the_model():
    """Compute kernels and exposed communication fill the measured step (the excess is what
    side-stream kernels overlap); the model's host issues a layer's kernels in under 1 % of
    their GPU time, so it leaves no gap there either."""
    assert outside_kernels_ms() <= 0.0
    assert abs(outside_kernels_ms()) < 0.02 * measured()["wall"]
    assert 0 < host_share() < 0.01


def test_the_split_adds_up_and_has_its_source():
    m = measured()
    assert m["compute"] + m["comm"] == m["kernels"]
    assert 0 < m["other"] < m["gemm"]
    assert all(
        r["source"].startswith("NVIDIA-NeMo/Automodel MFSDP-llama3-70b")
        for r in read_table("published_step_split")
    )
