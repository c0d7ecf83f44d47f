"""GPipe Table 2's trend (Huang et al. 2019; tests/data/gpipe_throughput.csv), directionally:
with a fixed model and mini-batch, throughput rises with the micro-batches M for K ≥ 2
partitions and with the partitions K for M ≥ 4. Our table beside theirs: docs/schedules.md."""

import csv
from pathlib import Path

import pytest

import clustersim as cs
from tests.conftest import synthetic

ROWS = list(csv.DictReader(open(Path(__file__).parent / "data" / "gpipe_throughput.csv")))


def throughput(k: int, m: int, total_f: float = 8e-3, total_b: float = 16e-3) -> float:
    """Samples/s of GPipe on K stages and M micro-batches of one fixed mini-batch (M samples)."""
    raw = synthetic(k, m, total_f / (k * m), total_b / (k * m), schedule="gpipe")
    return cs.simulate(raw, progress=False).summary["samples_per_s"] / m


@pytest.fixture(scope="module")
def ours():
    return {(k, m): throughput(k, m) / throughput(2, 1) for k in (2, 4, 8) for m in (1, 4, 32)}


def test_paper_rows_are_present():
    assert {
        (int(r["K_partitions"]), int(r["M_microbatches"]))
        for r in ROWS
        if r["model"].startswith("AmoebaNet-D(18,256)") and "TPU" in r["hardware"]
    } == {(k, m) for k in (2, 4, 8) for m in (1, 4, 32)}


def test_throughput_rises_with_microbatches(ours):
    for k in (2, 4, 8):
        assert ours[(k, 1)] < ours[(k, 4)] < ours[(k, 32)]


def test_throughput_rises_with_partitions(ours):
    for m in (4, 32):
        assert ours[(2, m)] < ours[(4, m)] < ours[(8, m)]
    # with one micro-batch a pipeline only adds stages in series: no gain (GPipe: small gains)
    assert ours[(8, 1)] == pytest.approx(ours[(2, 1)], rel=1e-9)
