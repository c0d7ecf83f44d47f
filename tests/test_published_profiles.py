"""A published nsys profile of a Megatron-Core / FSDP2 training step on H100: each kernel's
measured average between the model's price alone and beside NCCL's CTAs
(clustersim/validation/published_profiles.py)."""

from __future__ import annotations

import pytest

from clustersim.validation.published_profiles import BAND, priced_us, profile_rows, within_band

ROWS = profile_rows()


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r["role"] == "check"], ids=lambda r: r["kernel"] + "-" + r["impl"]
)
def test_attention_kernels_of_the_step_lie_between_alone_and_beside_nccl(row):
    alone, near = priced_us(row)
    assert near > alone  # NCCL's CTAs take SMs from the kernel
    assert within_band(row), (alone, near, row["avg_us"], BAND)


def test_every_row_has_its_source_and_a_role():
    assert ROWS and all(
        r["source"].startswith("NVIDIA-NeMo/Automodel MFSDP-llama3-70b/analysis_report.md") for r in ROWS
    )
    assert {r["role"] for r in ROWS} == {"check", "context"}
