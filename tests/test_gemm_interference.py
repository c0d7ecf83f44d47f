"""The GEMM beside overlapped communication (clustersim.workload.gemm_interference) against
closed forms and the rows of data/interference_measurements.csv."""

import math

import pytest

from clustersim.hardware.interference import interference_model, interference_rows, slowdown_of, sm_budget
from clustersim.workload.cost_model import efficiency_for
from clustersim.workload.gemm_interference import relaunched_slowdown
from clustersim.workload.ops import Work
from clustersim.workload.tp_overlap import BULK, KIND, PIPELINE, RING, TPOverlap

H100, A100 = "H100-SXM5-80GB", "A100-SXM4-80GB"


def test_every_row_has_a_source_and_a_known_shape():
    rows = interference_rows()
    assert rows and all(r.source.strip() for r in rows)
    assert all(r.compute_slowdown is None or r.compute_slowdown >= 1 for r in rows)


def test_te_default_sm_budgets_are_the_rows():
    """TE's get_default_config: ring exchange 1 SM on copy engines, no margin; pipeline and
    bulk 16 SMs with set_sm_margin."""
    assert (sm_budget(KIND[RING]).comm_sms, sm_budget(KIND[RING]).sm_margin) == (1, False)
    for method in (PIPELINE, BULK):
        assert (sm_budget(KIND[method]).comm_sms, sm_budget(KIND[method]).sm_margin) == (16, True)
    assert sm_budget("deepep").comm_sms == 20
    with pytest.raises(KeyError):
        sm_budget("no such kind")


def test_many_full_waves_on_both_sm_counts_give_the_sm_share_exactly():
    """A grid that fills SMs and SMs − 16 in whole waves (H100: 3828 = lcm(132, 116) tiles of
    128×128, one K slice): slowdown = SMs / (SMs − 16), the old rule, to float precision."""
    eff = efficiency_for(H100)
    assert eff.sms == 132
    gemm = (128 * 132, 128 * 29, 8192)
    assert relaunched_slowdown(eff, gemm, 1, 16) == pytest.approx(slowdown_of(132), rel=1e-12)


def test_a_grid_that_fills_the_gpu_once_pays_a_second_wave_on_fewer_sms():
    """H100, 132 tiles of 128×128 (one wave on 132 SMs) on 116: the best tile/split on 116 SMs
    is no better than a second, partial wave, and never better than the SM share; the forum
    row (same GEMM grid beside a 24-CTA all-gather, no margin) measured 1.70 — TE's margin
    lets the GEMM re-tile for the SMs it keeps, so it is not slower than that tail case by
    more than the row's own 'nearly doubles' (2.0)."""
    eff = efficiency_for(H100)
    gemm = (128 * 12, 128 * 11, 8192)
    f = relaunched_slowdown(eff, gemm, 1, 16)
    assert slowdown_of(132) <= f <= 2.0 + 1e-12
    forum = next(r for r in interference_rows() if r.overlap == "nccl_all_gather")
    assert forum.gemm_ctas == 132 and forum.comm_sms == 24
    # the forum's fixed 132-CTA grid on 132 − 24 SMs: ceil(132/108) = 2 waves for 1; the
    # measured 1.70 lies within 18 % of that bound ("nearly doubles")
    bound = math.ceil(forum.gemm_ctas / (132 - forum.comm_sms))
    assert bound == 2 and abs(forum.compute_slowdown / bound - 1) <= 0.18
    g = relaunched_slowdown(eff, gemm, 1, forum.comm_sms)
    assert slowdown_of(132) <= g <= bound + 1e-12


def test_the_rule_stays_within_lee_et_al_measured_range():
    """Lee et al. 2025: overlapped kernels on A100/H100/MI250/MI210 ran 1.189× slower on
    average, 1.40× at most; the SM rule for A100 and H100 (16 SMs) lies in [1, 1.40]."""
    mean, top = (
        next(r for r in interference_rows() if r.overlap == k).compute_slowdown for k in ("nccl", "nccl_max")
    )
    assert 1 < mean < top
    for gpu in (A100, H100):
        sms = efficiency_for(gpu).sms
        assert 1 < slowdown_of(sms) <= top


def test_no_sms_or_no_taken_sms():
    eff = efficiency_for(H100)
    assert relaunched_slowdown(eff, (4096, 4096, 4096), 1, 0) == 1.0
    assert relaunched_slowdown(eff, (4096, 4096, 4096), 1, 132) is None


def test_tp_margin_per_method():
    """Off at slowdown 1; ring exchange keeps every SM; pipeline/bulk: the wave model's
    factor on a GEMM with a shape, the scalar where no shape (or SM count) is known."""
    eff = efficiency_for(H100)
    work = Work(flops=2.0 * 4096 * 4096 * 4096, gemm=(4096, 4096, 4096))
    f = relaunched_slowdown(eff, work.gemm, 1, 16)
    assert TPOverlap(8, 4, 1.0).margin(PIPELINE, 1.0, eff, work) == 0.0
    on = TPOverlap(8, 4, 1.3)
    assert on.margin(RING, 1.0, eff, work) == 0.0
    assert on.margin(PIPELINE, 1.0, eff, work) == pytest.approx(f - 1, rel=1e-12)
    assert on.margin(BULK, 2.0, None, None) == pytest.approx(0.6, rel=1e-12)


def test_the_breakdown_says_which_model_priced_each_kind():
    """interference_model names the SM rule where the slowdown is the GPU's rule value, else
    'stated'; TP userbuffers by the wave model on SMs − num_sm, the scalar without SM count."""
    rule = slowdown_of(132)
    said = interference_model(132, rule, True)
    assert "SM rule" in said and f"wave model on {132 - 16} of 132 SMs" in said
    assert "stated" in interference_model(132, 1.3, False) and "tp" not in interference_model(132, 1.3, False)
    assert "scalar fallback" in interference_model(0, 1.3, True)
