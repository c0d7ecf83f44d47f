"""PipeDream (asynchronous 1F1B, weight stashing) and PipeDream-2BW on uniform synthetic stages."""

import pytest

import clustersim as cs
from clustersim.trace.versions import max_versions_alive, update_staleness
from tests.conftest import synthetic


@pytest.mark.parametrize("p,m", [(4, 8), (3, 5), (5, 16)])
def test_pipedream_steady_state_has_no_bubbles(p, m):
    f, b, its = 1e-3, 2e-3, 3
    res = cs.simulate(synthetic(p, m, f, b, schedule="pipedream", iterations=its), progress=False)
    # no flush: the run is one 1F1B pipeline of m·its micro-batches
    assert res.spans["end_s"].max() == pytest.approx((m * its + p - 1) * (f + b), rel=1e-12)
    # steady state: one micro-batch per (f + b) on every stage, no bubbles
    assert res.summary["iteration_time_s"] == pytest.approx(m * (f + b), rel=1e-12)
    assert res.summary["bubble_fraction_max"] == pytest.approx(0.0, abs=1e-9)
    b_ends = (
        res.spans[(res.spans["phase"] == "B") & (res.spans["stage"] == 0)]["end_s"].sort_values().to_numpy()
    )
    gaps = b_ends[p:-1] - b_ends[p - 1 : -2]
    assert gaps == pytest.approx([f + b] * len(gaps), rel=1e-9)


@pytest.mark.parametrize("p,m", [(4, 8), (3, 3), (6, 7)])
def test_pipedream_stashes_p_minus_s_versions(p, m):
    act, params = 2**20, 5 * 2**20
    raw = synthetic(p, m, schedule="pipedream", activation=act, params=params, iterations=2)
    res = cs.simulate(raw, progress=False)
    dev = res.devices.set_index("stage")
    for s in range(p):
        stashed = min(p - s, 2 * m)  # one stashed version per in-flight micro-batch
        assert dev.loc[s, "peak_memory_bytes"] == params + stashed * (params + act)
    # everything stashed is released once the run drains
    assert (res.memory.groupby("device")["allocated_bytes"].last() == params).all()


def test_backward_uses_its_forwards_weight_version():
    p, m = 4, 6
    prog = cs.compile_scenario(cs.load_scenario(synthetic(p, m, schedule="pipedream", iterations=2)))
    fwd = {(o.device, o.iteration, o.microbatch): o.version for o in prog.ops if o.phase == "F"}
    bwd = {(o.device, o.iteration, o.microbatch): o.version for o in prog.ops if o.phase == "B"}
    assert fwd.keys() == bwd.keys() and fwd == bwd
    for (dev, it, mb), ver in fwd.items():
        j, s = it * m + mb, dev
        # the forward of micro-batch j on stage s ran after max(0, j − (p − s − 1)) updates
        assert ver == max(0, j - (p - s - 1))
    st = update_staleness(prog)
    for s in range(p):
        steady = st[(st["stage"] == s) & (st["version"] > p)]
        assert (steady["staleness"] == p - s - 1).all()
    assert max(max_versions_alive(prog).values()) == p


@pytest.mark.parametrize("p,m", [(4, 4), (4, 8), (3, 7)])
def test_2bw_keeps_two_versions_and_staleness_one(p, m):
    prog = cs.compile_scenario(cs.load_scenario(synthetic(p, m, schedule="pipedream_2bw", iterations=3)))
    assert max(max_versions_alive(prog).values()) == 2
    st = update_staleness(prog)
    assert len(st) == 3 * p  # one update per batch per stage
    assert st[st["version"] > 1]["staleness"].max() == 1
    fwd = {(o.device, o.iteration, o.microbatch): o.version for o in prog.ops if o.phase == "F"}
    bwd = {(o.device, o.iteration, o.microbatch): o.version for o in prog.ops if o.phase == "B"}
    assert fwd == bwd


def test_2bw_needs_m_at_least_p():
    with pytest.raises(cs.ScenarioError, match="pipedream_2bw.*m = 2.*pp = 4"):
        cs.load_scenario(synthetic(4, 2, schedule="pipedream_2bw"))


def test_2bw_double_buffers_weights_and_throughput():
    p, m, f, b, params = 4, 8, 1e-3, 2e-3, 2**20
    res = cs.simulate(
        synthetic(p, m, f, b, schedule="pipedream_2bw", params=params, iterations=3), progress=False
    )
    assert (res.devices["peak_memory_bytes"] == 2 * params).all()
    assert res.summary["iteration_time_s"] == pytest.approx(m * (f + b), rel=1e-12)
    assert res.summary["weight_staleness_max"] == 1


def test_flush_schedules_have_no_staleness():
    res = cs.simulate(synthetic(4, 8, iterations=2), progress=False)
    assert res.summary["weight_staleness_max"] == 0
