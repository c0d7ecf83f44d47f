"""Link degradation windows: a link at a fraction of its bandwidth for a while."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.network.degradation import apply_degradations, finish_time, min_profile, rate_profile
from clustersim.scenario.schema import LinkDegradationSpec
from clustersim.topology import build_topology

from .conftest import synthetic
from .test_fabric import run_flows
from .test_topology import chain

MiB = 1 << 20


def window_end(nbytes, bw, t0, t1, f, start=0.0):
    """Closed form: full rate until t0, f × rate in [t0, t1), full rate after."""
    t, left = start, float(nbytes)
    if t < t0:
        if left <= bw * (t0 - t):
            return t + left / bw
        left -= bw * (t0 - t)
        t = t0
    if t < t1:
        if left <= f * bw * (t1 - t):
            return t + left / (f * bw)
        left -= f * bw * (t1 - t)
        t = t1
    return t + left / bw


def degrade(graph, a, b, start, end, factor):
    apply_degradations(graph, [LinkDegradationSpec(between=(a, b), start=start, end=end, factor=factor)])
    return graph


@given(
    nbytes=st.integers(1, 64 * MiB),
    t0=st.floats(0, 0.05),
    dt=st.floats(1e-4, 0.1),
    f=st.floats(0, 1),
    start=st.floats(0, 0.1),
)
@settings(max_examples=80, deadline=None)
def test_finish_time_is_the_piecewise_closed_form(nbytes, t0, dt, f, start):
    bw = 1e9
    prof = rate_profile(bw, ((t0, t0 + dt, f),))
    assert finish_time(prof, start, nbytes) == pytest.approx(
        window_end(nbytes, bw, t0, t0 + dt, f, start), rel=1e-9
    )


def test_overlapping_windows_multiply_and_route_takes_the_pointwise_minimum():
    prof = rate_profile(100.0, ((1.0, 3.0, 0.5), (2.0, 4.0, 0.5)))
    assert prof == [(0.0, 100.0), (1.0, 50.0), (2.0, 25.0), (3.0, 50.0), (4.0, 100.0)]
    route = min_profile([prof, rate_profile(60.0, ())])
    assert route == [(0.0, 60.0), (1.0, 50.0), (2.0, 25.0), (3.0, 50.0), (4.0, 60.0)]


@pytest.mark.parametrize("kind,chunk", [("packet", MiB), ("packet", 64 * MiB), ("analytical", None)])
@pytest.mark.parametrize(
    "t0,t1,f", [(0.002, 0.006, 0.25), (0.0, 1.0, 0.5), (0.02, 0.03, 0.1), (0.001, 0.004, 0.0)]
)
def test_one_hop_transfer_through_a_window(kind, chunk, t0, t1, f):
    # one link: chunks leave back to back, so the packet model integrates the same rate
    bw, lat, nbytes = 1e9, 5e-6, 8 * MiB
    g = degrade(build_topology(chain(1, bw, lat)), "gpu0", "gpu1", t0, t1, f)
    (t,), _, _ = run_flows(g, [("gpu0", "gpu1", nbytes)], kind=kind, chunk_size=chunk)
    assert t == pytest.approx(window_end(nbytes, bw, t0, t1, f) + lat, rel=1e-9)


def test_analytical_route_rate_is_its_slowest_link_at_each_moment():
    # two links of 1 GB/s; the second drops to 0.2 GB/s in [1 ms, 3 ms)
    bw, nbytes = 1e9, 4 * MiB
    g = degrade(build_topology(chain(2, bw, 0.0)), "s0", "gpu1", 1e-3, 3e-3, 0.2)
    (t,), _, _ = run_flows(g, [("gpu0", "gpu1", nbytes)], kind="analytical")
    assert t == pytest.approx(window_end(nbytes, bw, 1e-3, 3e-3, 0.2), rel=1e-12)
    # and the other direction of the link is degraded too
    (back,), _, _ = run_flows(g, [("gpu1", "gpu0", nbytes)], kind="analytical")
    assert back == pytest.approx(t, rel=1e-12)


def test_link_spans_stretch_inside_the_window():
    bw, nbytes = 1e9, 8 * MiB
    g = degrade(build_topology(chain(1, bw, 0.0)), "gpu0", "gpu1", 0.0, 1.0, 0.5)
    _, spans, _ = run_flows(g, [("gpu0", "gpu1", nbytes)], chunk_size=MiB)
    busy = sum(s[7] - s[6] for s in spans if s[0] == "gpu0->gpu1")
    assert busy == pytest.approx(2 * nbytes / bw, rel=1e-12)


def test_pipeline_send_inside_the_window_is_slower_and_the_one_after_is_not():
    # 2 stages, one micro-batch, GPipe, analytical network over gpu0 → nvswitch0 → gpu1.
    # The forward's activation crosses while gpu0's uplink runs at k·B; the backward's
    # gradient after the window: T = 2F + 2Bw + S/(k·B) + S/B + two route latencies.
    fwd, bwd, S, B, k = 1e-3, 2e-3, 16 * MiB, 50e9, 0.1
    raw = synthetic(
        2, 1, fwd, bwd, schedule="gpipe", activation=S, bandwidth=B, latency=2e-6, network="analytical"
    )
    base = cs.simulate(raw).summary["iteration_time_s"]
    raw["cluster"]["link_degradations"] = [
        {"between": ["gpu0", "nvswitch0"], "start": 0.0, "end": 5e-3, "factor": k}
    ]
    res = cs.simulate(raw)
    lat = 2e-6
    expected = 2 * fwd + 2 * bwd + S / (k * B) + S / B + 2 * lat
    assert base == pytest.approx(2 * fwd + 2 * bwd + 2 * S / B + 2 * lat, rel=1e-12)
    assert res.summary["iteration_time_s"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "entry,message",
    [
        (
            {"between": ["gpu0", "gpu9"], "start": 0, "end": 1, "factor": 0.5},
            r"'gpu9' is not a node of this topology",
        ),
        (
            {"between": ["gpu0", "gpu1"], "start": 0, "end": 1, "factor": 0.5},
            r"no link joins gpu0 and gpu1; gpu0 links to: node0.nic0, nvswitch0",
        ),
        (
            {"between": ["gpu0", "nvswitch0"], "start": 1, "end": 1, "factor": 0.5},
            r"end \(1.0 s\) must come after start",
        ),
        ({"between": ["gpu0", "nvswitch0"], "start": 0, "end": 1, "factor": 1.5}, r"factor: 1.5 is invalid"),
    ],
)
def test_bad_windows_are_clear_errors(entry, message):
    raw = synthetic(2, 1, network="packet")
    raw["cluster"]["link_degradations"] = [entry]
    with pytest.raises(cs.ScenarioError, match=r"cluster.link_degradations(\[0\])?"):
        cs.simulate(raw)
    with pytest.raises(cs.ScenarioError, match=message):
        cs.simulate(raw)


def test_windows_need_a_topology_network():
    raw = synthetic(2, 1, network="direct")
    raw["cluster"]["link_degradations"] = [
        {"between": ["gpu0", "nvswitch0"], "start": 0, "end": 1, "factor": 0.5}
    ]
    with pytest.raises(cs.ScenarioError, match=r"need simulation.network packet, flow or analytical"):
        cs.load_scenario(raw)
