"""Qi et al. (ICLR'24) Tables 3-5, 9: profiled T_F, T_B, T_W, T_comm of the 1.5B and 6.2B
models on p = 8 stages; we feed them to the synthetic model and compare bubble rates.

Bubble rate = (cost − m(T_F + T_B + T_W)) / cost, cost = the longest stage's own execution
time. T_comm is the direct network's latency with zero activation bytes: every
stage-to-stage transfer delays its consumer by T_comm. Tolerance 0.001 absolute for all
three (the issue allows 0.02 for ZB-H1/H2; ours match to ≤ 0.0008, so a looser bound would
hide a regression — per-row table in docs/schedules.md).
"""

import csv
from pathlib import Path

import pytest

import clustersim as cs
from tests.conftest import synthetic

ROWS = [
    r
    for r in csv.DictReader(open(Path(__file__).parent / "data" / "zero_bubble_schedules.csv"))
    if r["schedule"] == "1F1B" and r["model"] in ("1.5B", "6.2B")
]


def bubble_rate(row, schedule: str, v: int = 1) -> float:
    f, b, w, c = (float(row[k]) * 1e-3 for k in ("T_F", "T_B", "T_W", "T_comm"))
    p, m = int(row["pipeline_stages_gpus"]), int(row["num_microbatches"])
    raw = synthetic(p, m, f / v, (b + w) / v, schedule=schedule, latency=c, layers_per_stage=1)
    raw["model"]["layers"] = p * v
    raw["model"]["backward_weight"] = w / v if schedule.startswith("zb") else 0.0
    raw["parallel"]["virtual_stages"] = v
    res = cs.simulate(raw, progress=False)
    comp = res.spans[(res.spans["lane"] == "compute") & (res.spans["phase"] != "O")]
    g = comp.groupby("stage")
    cost = float((g["end_s"].max() - g["start_s"].min()).max())
    return (cost - m * (f + b + w)) / cost


def test_rows_present():
    assert len(ROWS) == 6  # 2 models × m ∈ {24, 32, 64}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['model']}-m{r['num_microbatches']}")
def test_1f1b_bubble_rate(row):
    assert bubble_rate(row, "1f1b") == pytest.approx(float(row["bubble_rate_calc_table5"]), abs=0.001)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['model']}-m{r['num_microbatches']}")
def test_zb_h1_bubble_rate(row):
    assert bubble_rate(row, "zb_h1") == pytest.approx(float(row["bubble_ZB-H1"]), abs=0.001)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['model']}-m{r['num_microbatches']}")
def test_zb_h2_bubble_rate(row):
    assert bubble_rate(row, "zb_h2") == pytest.approx(float(row["bubble_ZB-H2"]), abs=0.001)
