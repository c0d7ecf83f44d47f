"""The iteration breakdown's parts in closed form: compute, exposed communication split
by parallelism, and the bubble (compute and communication both idle)."""

from __future__ import annotations

import pytest

import clustersim as cs
from tests.conftest import synthetic


@pytest.mark.parametrize("f,b,t", [(1e-3, 2e-3, 0.5e-3), (2e-3, 1e-3, 3e-3)])
def test_two_stage_one_microbatch_breakdown(f, b, t):
    # stage 0: F [0, f], its activation send [f, f + t] — stage 1 receives over the same
    # interval — stage 1's F and B, the gradient back [2f + t + b, 2f + 2t + b], stage 0's B.
    # Each GPU: compute f + b, exposed pipeline transfers 2t, and the bubble f + b.
    bandwidth = 1e9
    raw = synthetic(2, 1, f, b, activation=t * bandwidth, bandwidth=bandwidth)
    res = cs.simulate(raw, progress=False)
    T = 2 * (f + b + t)
    assert res.summary["iteration_time_s"] == pytest.approx(T, rel=1e-12)
    assert res.summary["bubble_fraction"] == pytest.approx((f + b) / T, rel=1e-9)
    assert res.summary["exposed_pp_fraction"] == pytest.approx(2 * t / T, rel=1e-9)
    assert res.summary["exposed_comm_fraction"] == pytest.approx(2 * t / T, rel=1e-9)
    for k in ("tp", "cp", "ep", "dp"):
        assert res.summary[f"exposed_{k}_fraction"] == 0.0
    dev = res.devices.set_index("device")["bubble_fraction"]
    assert list(dev) == pytest.approx([(f + b) / T] * 2, rel=1e-9)


def test_exposed_dp_allreduce_is_not_bubble():
    # dp 2 without a pipeline: forward, backward, then the gradient all-reduce with nothing
    # to overlap it — exposed DP communication, no bubble
    raw = synthetic(1, 2, 1e-3, 2e-3, params=2**24, dp=2, latency=1e-6)
    res = cs.simulate(raw, progress=False)
    s = res.summary
    assert s["bubble_fraction"] == pytest.approx(0.0, abs=1e-12)
    assert s["exposed_dp_fraction"] > 0
    assert s["exposed_dp_fraction"] == pytest.approx(s["exposed_comm_fraction"], rel=1e-12)
    iteration = s["iteration_time_s"]
    compute = 2 * 3e-3
    assert s["exposed_dp_fraction"] == pytest.approx((iteration - compute) / iteration, rel=1e-9)
