"""Closed-form pipeline results on uniform synthetic stages (direct network, no contention).

Notation: p stages, m micro-batches, f / b forward / backward time per stage per
micro-batch, c = latency + activation_bytes / bandwidth the time of one stage-to-stage
transfer.
"""

import pytest

import clustersim as cs
from tests.conftest import synthetic

CASES = [(1, 1), (1, 5), (2, 1), (2, 2), (4, 8), (4, 3), (8, 16), (5, 7), (3, 24)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", CASES)
def test_zero_transfer_time_matches_textbook(schedule, p, m):
    f, b = 1.3e-3, 2.9e-3
    res = cs.simulate(synthetic(p, m, f, b, schedule=schedule))
    # iteration = (m + p - 1)(f + b); bubble = (p - 1)/(m + p - 1)
    assert res.summary["iteration_time_s"] == pytest.approx((m + p - 1) * (f + b), rel=1e-12)
    assert abs(res.summary["bubble_fraction"] - (p - 1) / (m + p - 1)) < 1e-9
    assert abs(res.summary["bubble_fraction_max"] - (p - 1) / (m + p - 1)) < 1e-9


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (6, 5), (8, 32)])
def test_gpipe_with_transfer_time(p, m):
    # With transfers of c ≤ min(f, b) per hop, the forward wave reaches the last stage
    # after (p-1)(f+c), the gradient wave returns in (p-1)(b+c), and every stage runs its
    # m forwards and m backwards back to back:
    #     T = (m + p - 1)(f + b) + 2 (p - 1) c   (+ optimizer on the first stage)
    f, b, opt = 2e-3, 3e-3, 0.5e-3
    latency, act, bw = 20e-6, 2**20 * 16, 50e9
    c = latency + act / bw
    assert c <= min(f, b)
    res = cs.simulate(
        synthetic(p, m, f, b, schedule="gpipe", activation=act, bandwidth=bw, latency=latency, optimizer=opt)
    )
    expected = (m + p - 1) * (f + b) + 2 * (p - 1) * c + opt
    assert res.summary["iteration_time_s"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("p", [2, 3, 8])
def test_single_microbatch_with_transfer_time(p):
    # m = 1: one forward wave and one backward wave, 2(p-1) transfers on the path, any schedule.
    f, b, c = 1e-3, 2e-3, 0.4e-3
    for schedule in ("gpipe", "1f1b"):
        res = cs.simulate(synthetic(p, 1, f, b, schedule=schedule, latency=c))
        assert res.summary["iteration_time_s"] == pytest.approx(p * (f + b) + 2 * (p - 1) * c, rel=1e-12)


def test_1f1b_transfer_time_never_beats_lower_bound():
    f, b, c, p, m = 1e-3, 2e-3, 0.3e-3, 4, 12
    res = cs.simulate(synthetic(p, m, f, b, schedule="1f1b", latency=c))
    assert res.summary["iteration_time_s"] >= (m + p - 1) * (f + b) + 2 * (p - 1) * c - 1e-12


def test_steady_state_iteration_is_reported():
    p, m, f, b, opt = 4, 8, 1e-3, 2e-3, 1e-3
    res = cs.simulate(synthetic(p, m, f, b, optimizer=opt, iterations=3))
    assert res.summary["iteration_time_s"] == pytest.approx((m + p - 1) * (f + b) + opt, rel=1e-12)
    assert res.spans["iteration"].max() == 2
    # three back-to-back iterations: the run ends after 3 iteration times
    assert res.spans["end_s"].max() == pytest.approx(3 * ((m + p - 1) * (f + b) + opt), rel=1e-12)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(4, 8), (4, 2), (6, 9), (1, 3)])
def test_peak_activation_memory(schedule, p, m):
    act, params, lps = 2**20, 3 * 2**20, 2  # 1 MiB per layer per micro-batch, 2 layers per stage
    res = cs.simulate(synthetic(p, m, schedule=schedule, activation=act, params=params, layers_per_stage=lps))
    dev = res.devices.set_index("stage")
    for s in range(p):
        in_flight = m if schedule == "gpipe" else min(p - s, m)
        assert dev.loc[s, "peak_memory_bytes"] == lps * params + in_flight * lps * act
    # everything allocated was freed: the ledger ends at the static memory
    last = res.memory.groupby("device")["allocated_bytes"].last()
    assert (last == lps * params).all()
