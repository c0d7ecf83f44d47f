"""``clustersim validate``'s kernel tables beyond GEMM and attention (memory-bound, MoE
grouped GEMM, EP all-to-all, host dispatch, interference): each ends with its pass/fail
line against its stated bound, all hold today, a broken bound fails, and docs/validation.md
holds them as the code prints them."""

from __future__ import annotations

from pathlib import Path

import pytest

import clustersim.validation.kernel_families as kf
from clustersim.validation.te_gemms import te_gemm_tables


def test_every_kernel_table_ends_with_a_passing_verdict():
    md, verdicts = kf.family_tables()
    assert len(verdicts) == len(kf.TABLES) == md.count("\n### ") + 1
    for section, verdict in zip(md.split("\n\n### "), verdicts, strict=True):
        assert section.rstrip().endswith(verdict.line())
        assert verdict.passed, verdict.line()


def test_a_table_outside_its_bound_fails(monkeypatch):
    # DeepGEMM's contiguous rows sit 0–17 % from the model: a 1 % bound must fail them
    monkeypatch.setattr(kf, "GROUPED_CONTIGUOUS", 0.01)
    _, verdict = kf.grouped_table()
    assert not verdict.passed and verdict.line().startswith("**FAIL**") and "contiguous" in verdict.detail


@pytest.mark.slow
def test_validate_ends_every_table_with_its_verdict_and_fails_on_one(monkeypatch):
    from clustersim.validation import report

    monkeypatch.setattr(report, "run_rows", lambda rows, progress=None: [])  # Table 1: elsewhere
    md, _, verdicts = report.run_validation([0])
    names = {v.table for v in verdicts}
    # GEMM / attention per GPU, TE's GEMM and quantize rows, the families, the collectives
    assert {
        "kernels H100-SXM5-80GB",
        "kernels B300-SXM-288GB",
        "memory-bound kernels",
        "interference",
    } <= names
    assert any(n.startswith("TE GEMMs") for n in names) and any(n.startswith("EP all-to-all") for n in names)
    assert all(v.line() in md for v in verdicts)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "validation.md").read_text()
    assert kf.family_tables()[0] in doc and te_gemm_tables() in doc
