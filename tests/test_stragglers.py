"""Straggler GPUs and random compute noise (device-level variability)."""

import numpy as np
import pytest

import clustersim as cs
from tests.conftest import synthetic


@pytest.mark.parametrize("p,m,s,k", [(4, 8, 0, 2.0), (4, 8, 2, 1.5), (3, 5, 2, 3.0), (5, 1, 4, 2.0), (1, 4, 0, 1.7)])
def test_gpipe_with_one_slow_stage(p, m, s, k):
    # A flow shop of identical jobs: the slow stage paces the forward and the backward
    # waves, T = Σ_stages (f + b) + (m − 1)·k(f + b) = (p − 1)(f + b) + m·k(f + b).
    f, b = 1e-3, 2e-3
    raw = synthetic(p, m, f, b, schedule="gpipe")
    raw["cluster"]["stragglers"] = [{"gpus": [s], "slowdown": k}]
    res = cs.simulate(raw)
    assert res.summary["iteration_time_s"] == pytest.approx((p - 1) * (f + b) + m * k * (f + b), rel=1e-12)
    # the slow stage is never idle in its window; everyone else waits for it
    bub = res.devices.set_index("stage")["bubble_fraction"]
    assert bub[s] == pytest.approx(1 - m * k * (f + b) / res.summary["iteration_time_s"], abs=1e-12)


def test_data_parallel_ranks_wait_for_the_straggler_at_the_allreduce():
    f, b, m, k = 1e-3, 2e-3, 4, 1.5
    raw = synthetic(1, m, f, b, dp=2, params=2**20)
    raw["cluster"]["stragglers"] = [{"gpus": [1], "slowdown": k}]
    res = cs.simulate(raw)
    ar = res.spans[res.spans["kind"] == "collective"].set_index("device")
    # both members' all-reduce spans start when the slow replica arrives
    assert ar.loc["gpu0", "start_s"] == ar.loc["gpu1", "start_s"] == pytest.approx(m * k * (f + b), rel=1e-12)
    comp0 = res.spans[(res.spans["device"] == "gpu0") & (res.spans["phase"] == "B")]
    assert comp0["end_s"].max() == pytest.approx(m * (f + b), rel=1e-12)  # gpu0 finished early, then waited


def test_noise_is_seeded_and_mean_one():
    raw = synthetic(2, 64, 1e-3, 2e-3)
    raw["simulation"]["compute_noise"] = {"distribution": "lognormal", "sigma": 0.2}
    a, b = cs.simulate(raw), cs.simulate(raw)
    assert a.spans.equals(b.spans)
    raw["simulation"]["seed"] = 1
    c = cs.simulate(raw)
    assert not a.spans.equals(c.spans)
    comp = a.spans[(a.spans["lane"] == "compute") & (a.spans["phase"] == "F")]
    ratio = (comp["end_s"] - comp["start_s"]) / 1e-3
    assert ratio.std() > 0.1
    assert ratio.mean() == pytest.approx(1.0, abs=0.08)
    assert np.all(ratio > 0)


def test_bad_straggler_is_a_clear_error():
    raw = synthetic(2, 2)
    raw["cluster"]["stragglers"] = [{"gpus": [7], "slowdown": 2}]
    with pytest.raises(cs.ScenarioError, match=r"cluster.stragglers\[0\].gpus: 7 is invalid; GPU indices run from 0 to 1"):
        cs.load_scenario(raw)
    raw["cluster"]["stragglers"] = [{"gpus": [1], "slowdown": -1}]
    with pytest.raises(cs.ScenarioError, match=r"cluster.stragglers\[0\].slowdown: -1 is invalid; Input should be greater than 0"):
        cs.load_scenario(raw)
