"""Availability drawn from the fleet's failure rates (docs/fleet.md, "Availability"):
no failures → every GPU throughout; a seed fixes the timeline; over many seeds the
time-average of GPUs out is the alternating-renewal closed form (Little's law); only the
hardware classes take GPUs; refusals name the field."""

from __future__ import annotations

import math

import numpy as np
import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.faults.availability import availability_from_failures, node_failure_rate

H = 3600.0
RAW = {
    "cluster": {"nodes": 8, "gpus_per_node": 2, "nic": {"per_node": 1}},
    "model": {"kind": "synthetic", "layers": 2, "forward": 1e-3, "backward": 2e-3, "params": 1e9},
    "training": {"global_batch": 16},
}


def out_average(rows, full, horizon):
    """Time-average of GPUs out over [0, horizon] of a step list."""
    ends = [t for t, _ in rows[1:]] + [horizon]
    return sum((full - g) * (e - t) for (t, g), e in zip(rows, ends)) / horizon


@pytest.mark.parametrize("failures", [{"mtbf": {"gpu": 0}}, {"mtbf": {"node": 10 * H}, "repair_time": 0}])
def test_no_failure_keeps_every_gpu(failures):
    assert availability_from_failures(RAW, 1000 * H, failures) == [(0.0, 16)]


def test_same_seed_same_timeline_other_seed_another():
    f = {"mtbf": {"node": 50 * H}, "repair_time": 5 * H, "seed": 7}
    a, b = (availability_from_failures(RAW, 500 * H, f) for _ in range(2))
    assert a == b and len(a) > 1
    assert availability_from_failures(RAW, 500 * H, f, seed=8) != a
    assert all(t1 > t0 for (t0, _), (t1, _) in zip(a, a[1:]))
    assert all(g1 != g0 and g1 % 2 == 0 for (_, g0), (_, g1) in zip(a, a[1:]))


def test_only_hardware_classes_take_gpus():
    f = {"mtbf": {"gpu": 100 * H, "node": 300 * H, "nic": 400 * H, "software": 1 * H, "link": 1 * H}}
    sc = cs.load_scenario({**RAW, "recovery": {"job_iterations": 1, "failures": f}})
    # a node's rate: its 2 GPUs', its 1 NIC's and its own (software and cables take none)
    assert node_failure_rate(sc) == pytest.approx(2 / (100 * H) + 1 / (400 * H) + 1 / (300 * H), rel=1e-12)


def test_time_average_out_is_littles_law():
    """N nodes, each failing at λ while in service and out for R: the time-average of nodes
    out is N·λR/(1 + λR) (Little's law with arrivals at λ·(N − L)). Over [0, H] from all
    up, a node's out fraction has mean p − p(1−p)R/(2H) and, by the renewal-reward CLT,
    standard deviation R·√(H·σ²/μ³)/H (cycle μ = 1/λ + R, σ² = 1/λ²); the mean of S
    seeds × N nodes is asserted within 5 of its standard errors."""
    lam, repair, horizon, seeds, nodes, gpn = 1 / (10 * H), 1 * H, 1000 * H, 40, 8, 2
    f = {"mtbf": {"node": 1 / lam}, "repair_time": repair}
    got = np.mean(
        [out_average(availability_from_failures(RAW, horizon, f, s), 16, horizon) for s in range(seeds)]
    )
    p = lam * repair / (1 + lam * repair)
    mu = 1 / lam + repair
    sd = repair * math.sqrt(horizon / lam**2 / mu**3) / horizon / math.sqrt(seeds * nodes)
    expected = nodes * gpn * (p - p * (1 - p) * repair / (2 * horizon))
    assert abs(got - expected) < 5 * nodes * gpn * sd
    # the M/G/∞ count N·λR·gpn overstates it by the factor 1 + λR (here 10 %)
    assert abs(got - nodes * gpn * lam * repair) > 5 * nodes * gpn * sd


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"horizon_s": -1.0}, "horizon_s"),
        ({"horizon_s": math.inf}, "horizon_s"),
        ({"seed": -1}, "recovery.failures.seed"),
        ({"seed": 1.5}, "recovery.failures.seed"),
        ({"failures": {"mtbf": {"gpu": "soon"}}}, "recovery.failures.mtbf.gpu"),
        ({"failures": {"study": "nope"}}, "recovery.failures.study"),
        ({"failures": {"mtbf": {"node": H}, "repair_time": -3}}, "recovery.failures.repair_time"),
        ({"failures": None}, "recovery.failures"),
        ({"failures": {"mtbf": {"node": 1.0}, "repair_time": 1e6}}, "recovery.failures"),
    ],
)
def test_bad_input_is_refused_naming_the_field(kwargs, field):
    args = {"horizon_s": 100 * H, "failures": {"mtbf": {"node": 10 * H}}, **kwargs}
    with pytest.raises(ScenarioError) as err:
        availability_from_failures(RAW, **args)
    assert err.value.field == field
