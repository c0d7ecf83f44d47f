"""Closed forms of the schedule zoo on uniform synthetic stages (direct network, no transfer time).

Notation: p stages, m micro-batches, v model chunks per stage; per stage and micro-batch
T_F forward, T_B = backward − backward_weight (input gradient), T_W = backward_weight.
Zero-bubble bubbles are per stage's own execution time (first op start to last op end),
as Qi et al. count them.
"""

import pytest

import clustersim as cs
from tests.conftest import synthetic


def _scenario(p, m, f, b, w=0.0, schedule="1f1b", v=1, **kw):
    raw = synthetic(p, m, f, b, schedule=schedule, layers_per_stage=v, **kw)
    raw["model"]["backward_weight"] = w / v
    raw["parallel"]["virtual_stages"] = v
    return raw


def stage_bubble(res, m, f, b):
    """max over stages of (own execution time) − m(T_F + T_B + T_W), from the spans."""
    comp = res.spans[(res.spans["lane"] == "compute") & (res.spans["phase"] != "O")]
    g = comp.groupby("stage")
    return float((g["end_s"].max() - g["start_s"].min()).max()) - m * (f + b)


@pytest.mark.parametrize(
    "p,v,m", [(2, 2, 4), (4, 2, 8), (4, 3, 8), (4, 4, 4), (3, 2, 6), (8, 2, 16), (2, 5, 2)]
)
def test_interleaved_bubble(p, v, m):
    f, b = 1.3e-3, 2.9e-3
    res = cs.simulate(_scenario(p, m, f, b, schedule="interleaved", v=v), progress=False)
    assert res.summary["bubble_fraction"] == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-9)
    assert res.summary["iteration_time_s"] == pytest.approx((m + (p - 1) / v) * (f + b), rel=1e-12)


def test_interleaved_needs_m_multiple_of_p():
    with pytest.raises(cs.ScenarioError, match=r"parallel.schedule.*multiple of pp = 4"):
        cs.load_scenario(_scenario(4, 6, 1e-3, 2e-3, schedule="interleaved", v=2))


def test_single_chunk_schedules_reject_virtual_stages():
    with pytest.raises(cs.ScenarioError, match=r"parallel.virtual_stages: 2 is invalid.*accepted: 1"):
        cs.load_scenario(_scenario(4, 8, 1e-3, 2e-3, schedule="zb_h1", v=2))


FBW = [
    (1.0e-3, 1.0e-3, 1.0e-3),
    (1.0e-3, 1.0e-3, 0.5e-3),
    (1.0e-3, 2.0e-3, 0.5e-3),
    (1.5e-3, 1.5e-3, 1.0e-3),
    (18.522e-3, 18.086e-3, 9.337e-3),
    (2.0e-3, 1.0e-3, 1.0e-3),
]


@pytest.mark.parametrize("f,tb,tw", FBW)
@pytest.mark.parametrize("p,m", [(4, 8), (4, 12), (8, 24), (3, 6)])
def test_zb_h1_bubble(f, tb, tw, p, m):
    res = cs.simulate(_scenario(p, m, f, tb + tw, tw, schedule="zb_h1"), progress=False)
    assert stage_bubble(res, m, f, tb + tw) == pytest.approx((p - 1) * (f + tb - tw), abs=1e-12)


@pytest.mark.parametrize("f,tb,tw", FBW)
@pytest.mark.parametrize("p,m", [(4, 8), (4, 12), (8, 24), (3, 6)])
def test_zb_h2_bubble(f, tb, tw, p, m):
    assert tw <= (f + tb) / 2  # the closed form's range
    res = cs.simulate(_scenario(p, m, f, tb + tw, tw, schedule="zb_h2"), progress=False)
    assert stage_bubble(res, m, f, tb + tw) == pytest.approx((p - 1) * (f + tb - 2 * tw), abs=1e-12)


def test_zero_bubble_beats_1f1b_in_order():
    p, m, f, tb, tw = 4, 12, 1e-3, 1e-3, 0.6e-3
    bubbles = {
        s: stage_bubble(
            cs.simulate(_scenario(p, m, f, tb + tw, tw, schedule=s), progress=False), m, f, tb + tw
        )
        for s in ("1f1b", "zb_h1", "zb_h2")
    }
    assert bubbles["1f1b"] == pytest.approx((p - 1) * (f + tb + tw), rel=1e-9)
    assert bubbles["1f1b"] > bubbles["zb_h1"] > bubbles["zb_h2"]


@pytest.mark.parametrize(
    "schedule,in_flight",
    [
        ("1f1b", lambda p, s, m: min(p - s, m)),
        ("zb_h1", lambda p, s, m: min(p - s, m)),
        ("zb_h2", lambda p, s, m: min(2 * p - 1 - 2 * s, m)),
        ("gpipe", lambda p, s, m: m),
    ],
)
@pytest.mark.parametrize("p,m", [(4, 8), (4, 12), (3, 3)])
def test_peak_activation_memory(schedule, in_flight, p, m):
    act, params = 2**20, 3 * 2**20
    res = cs.simulate(
        _scenario(p, m, 1e-3, 2e-3, 0.7e-3, schedule=schedule, activation=act, params=params), progress=False
    )
    dev = res.devices.set_index("stage")
    for s in range(p):
        assert dev.loc[s, "peak_memory_bytes"] == params + in_flight(p, s, m) * act
    assert (
        res.devices["peak_memory_bytes"].max() == params + in_flight(p, 0, m) * act
    )  # p·M_B, (2p−1)·M_B, m·M_B


@pytest.mark.parametrize("schedule", sorted(cs.SCHEDULES))
def test_every_schedule_runs_with_data_parallelism(schedule):
    p, m, dp = 2, 4, 2
    raw = _scenario(
        p,
        m,
        1e-3,
        2e-3,
        0.5e-3,
        schedule=schedule,
        dp=dp,
        params=2**20,
        activation=2**16,
        iterations=2,
        v=cs.SCHEDULES[schedule].chunks or 2,  # a schedule that takes any chunk count runs 2
    )
    prog = cs.compile_scenario(cs.load_scenario(raw))
    res = cs.simulate(raw, progress=False)
    ar = res.spans[res.spans["name"].str.startswith("dp all-reduce")]
    assert len(ar) > 0 and (ar["bytes"] > 0).all()
    # every optimizer step waits for its all-reduce
    for op in prog.ops:
        if op.phase == "O":
            assert any(prog.ops[d].kind == "collective" for d in op.deps)
