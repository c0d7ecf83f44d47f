"""ZB-V, DualPipe and DualPipe-V on uniform synthetic stages (direct network, no transfer time).

Per model chunk: T_F forward, T_B = backward − backward_weight (input gradient), T_W =
backward_weight; DualPipe's "B" is the full backward T_B + T_W. T_F&B, an overlapped pair's
time, is T_F + T_B + T_W on compute-only stages (clustersim.compilers.pipeline.overlap). Bubble =
the iteration's compute span − a stage's compute time (every stage computes the same), as
the DualPipe README counts it.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.compilers.pipeline.overlap import interleave
from clustersim.workload.stage_cost import Segment
from tests.conftest import synthetic

ACT, PARAMS = 2**20, 3 * 2**20  # bytes per layer


def _scenario(p, m, f, tb, tw, schedule, **kw):
    """p stages of two chunks, each chunk one layer of ``f``, ``tb + tw``, ``tw`` seconds —
    for DualPipe the model is p layers (each stage holds two of them, one per copy)."""
    layers = 1 if schedule == "dualpipe" else 2
    raw = synthetic(p, m, f * layers, (tb + tw) * layers, schedule=schedule, layers_per_stage=layers, **kw)
    raw["model"]["backward_weight"] = tw
    return raw


def _bubble(res) -> float:
    comp = res.spans[(res.spans["lane"] == "compute") & (res.spans["phase"] != "O")]
    busy = (comp["end_s"] - comp["start_s"]).groupby(comp["stage"]).sum()
    assert busy.max() - busy.min() < 1e-12  # uniform stages
    return float(comp["end_s"].max() - comp["start_s"].min() - busy.max())


# (T_F, T_B, T_W) per chunk; the DualPipe closed form needs T_F = T_B (its figures' grid)
EQUAL_FB = [(1e-3, 1e-3, 1e-3), (1e-3, 1e-3, 0.5e-3), (1.5e-3, 1.5e-3, 1e-3), (2e-3, 2e-3, 0.4e-3)]
OTHER = [(1e-3, 2e-3, 0.5e-3), (2e-3, 1e-3, 1e-3), (18.5e-3, 18.1e-3, 9.3e-3)]


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16)])
def test_zb_v_no_bubble_at_equal_times(p, m):
    res = cs.simulate(_scenario(p, m, 1e-3, 1e-3, 1e-3, "zb_v"), progress=False)
    # every stage computes from its first op to its last without idling (Qi et al. §6)
    comp = res.spans[(res.spans["lane"] == "compute") & (res.spans["phase"] != "O")]
    g = comp.groupby("stage")
    idle = (
        g["end_s"].max() - g["start_s"].min() - (comp["end_s"] - comp["start_s"]).groupby(comp["stage"]).sum()
    )
    assert idle.abs().max() < 1e-12


@pytest.mark.parametrize("f,tb,tw", EQUAL_FB + OTHER)
@pytest.mark.parametrize("p", [3, 4])
def test_zb_v_steady_state_adds_no_bubble(f, tb, tw, p):
    # more micro-batches lengthen only the bubble-free steady state: the bubble stays the same
    bubbles = [
        _bubble(cs.simulate(_scenario(p, m, f, tb, tw, "zb_v"), progress=False)) for m in (2 * p, 3 * p)
    ]
    assert bubbles[1] == pytest.approx(bubbles[0], abs=1e-12)


@pytest.mark.parametrize("p,m", [(4, 8), (4, 12), (3, 6), (2, 2)])
def test_zb_v_keeps_1f1b_memory_and_doubles_messages(p, m):
    runs = {}
    for s in ("zb_v", "1f1b"):
        raw = _scenario(p, m, 1e-3, 1e-3, 0.5e-3, s, activation=ACT, params=PARAMS)
        if s == "1f1b":
            raw["model"]["backward_weight"] = 0.0
        runs[s] = (cs.simulate(raw, progress=False), cs.compile_scenario(cs.load_scenario(raw)))
    peak = {s: r.devices["peak_memory_bytes"].max() for s, (r, _) in runs.items()}
    assert peak["zb_v"] == peak["1f1b"] == 2 * PARAMS + min(p, m) * 2 * ACT  # p·M_B on stage 0
    sends = {s: sum(op.kind == "send" for op in prog.ops) for s, (_, prog) in runs.items()}
    assert sends["1f1b"] == 2 * m * (p - 1)
    assert sends["zb_v"] == 2 * sends["1f1b"]


@pytest.mark.parametrize("f,tb,tw", EQUAL_FB)
@pytest.mark.parametrize(
    "schedule,p,m",
    [
        ("dualpipe", 4, 8),
        ("dualpipe", 6, 12),
        ("dualpipe", 8, 20),
        ("dualpipe_v", 2, 4),
        ("dualpipe_v", 4, 10),
        ("dualpipe_v", 4, 16),
    ],
)
def test_dualpipe_bubble(schedule, p, m, f, tb, tw):
    # DeepSeek-V3 Table 2 / the DualPipe README: (PP/2 − 1)(T_F&B + B − 3W) with B the full
    # backward; PP = pp for DualPipe, 2·pp stages for DualPipe-V
    stages = p if schedule == "dualpipe" else 2 * p
    t_fb = f + tb + tw
    res = cs.simulate(_scenario(p, m, f, tb, tw, schedule), progress=False)
    assert _bubble(res) == pytest.approx((stages / 2 - 1) * (t_fb + (tb + tw) - 3 * tw), abs=1e-12)


@pytest.mark.parametrize("schedule,p,m", [("dualpipe", 4, 8), ("dualpipe", 8, 16), ("dualpipe_v", 4, 8)])
def test_dualpipe_parameters_and_activations(schedule, p, m):
    raw = _scenario(p, m, 1e-3, 1e-3, 0.5e-3, schedule, activation=ACT, params=PARAMS)
    res, prog = cs.simulate(raw, progress=False), cs.compile_scenario(cs.load_scenario(raw))
    # DualPipe: two of the p stages per GPU (2×); DualPipe-V: two of 2p (a 1F1B stage's weights)
    assert [mem.weights for mem in prog.static_memory] == [2 * PARAMS] * p
    stages = p if schedule == "dualpipe" else 2 * p
    assert res.devices["peak_memory_bytes"].max() == 2 * PARAMS + (stages + 1) * ACT  # PP + 1 in flight


def test_dualpipe_feeds_both_ends_and_sums_mirrored_gradients():
    p, m = 4, 8
    raw = _scenario(p, m, 1e-3, 1e-3, 0.5e-3, "dualpipe", params=PARAMS)
    prog, res = cs.compile_scenario(cs.load_scenario(raw)), cs.simulate(raw, progress=False)
    fwd = res.spans[(res.spans["phase"] == "F") & (res.spans["lane"] == "compute")]
    entry = fwd.sort_values("start_s").groupby("microbatch")["stage"].first()
    assert entry.tolist() == [0] * (m // 2) + [p - 1] * (m // 2)
    ar = [op for op in prog.ops if op.kind == "collective" and op.phase != "F"]
    assert sorted(op.group for op in ar) == sorted([(0, 3), (0, 3), (1, 2), (1, 2)])
    assert all(op.nbytes == 2 * PARAMS for op in ar)


@pytest.mark.parametrize(
    "schedule,p,m,field,match",
    [
        ("dualpipe", 3, 6, "parallel.pp", "accepted: an even pp"),
        ("dualpipe", 4, 6, "parallel.schedule", r"m = 6\) to be at least 2·pp = 8 and even"),
        ("dualpipe", 4, 9, "parallel.schedule", "and even"),
        ("dualpipe_v", 4, 7, "parallel.schedule", r"m = 7\) to be at least 2·pp = 8"),
    ],
)
def test_refused_shapes_name_the_field(schedule, p, m, field, match):
    with pytest.raises(cs.ScenarioError, match=rf"{field}.*{match}"):
        cs.load_scenario(_scenario(p, m, 1e-3, 1e-3, 1e-3, schedule))


@settings(max_examples=40, deadline=None)
@given(
    schedule=st.sampled_from(["zb_v", "dualpipe", "dualpipe_v"]),
    p=st.integers(1, 8),
    extra=st.integers(0, 12),
)
def test_every_accepted_shape_compiles_without_deadlock(schedule, p, extra):
    if schedule == "dualpipe":
        p = 2 * ((p + 1) // 2)  # even
        m = 2 * p + 2 * (extra // 2)
    elif schedule == "dualpipe_v":
        m = 2 * p + extra
    else:
        m = 1 + extra
    prog = cs.compile_scenario(cs.load_scenario(_scenario(p, m, 1e-3, 1e-3, 0.5e-3, schedule)))
    prog.check()  # a cycle through deps and lane order would deadlock
    res = cs.simulate(_scenario(p, m, 1e-3, 1e-3, 0.5e-3, schedule), progress=False)
    assert res.summary["iteration_time_s"] > 0


def test_overlapped_pair_alternates_compute_and_hides_communication():
    c, x = Segment("compute", 1.0), Segment("collective", 0.0, collective="all_reduce", nbytes=8)
    # forward: attention, dispatch, MLP, combine; backward likewise (DeepSeek-V3 Figure 4)
    order = interleave([c, x, c, x], [c, x, c, x])
    assert order == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    # each chunk's collective is issued right after its compute, before the other chunk's compute
    assert interleave([x, c], [c]) == [(0, 0), (0, 1), (1, 0)]


def _tiny_tp_transformer(schedule):
    return {
        "name": f"pair-{schedule}",
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": "A100-SXM4-80GB"},
        "model": {"layers": 4, "hidden": 1024, "heads": 8, "vocab": 1000, "seq_len": 512},
        "training": {"global_batch": 8, "micro_batch": 1},
        "parallel": {"pp": 2, "tp": 2, "schedule": schedule},
        "simulation": {"network": "direct"},
    }


def _forward_tp_under_backward_compute(schedule) -> tuple[float, float]:
    """(seconds of forward TP collectives that run while a backward computes, their total) on GPU 0."""
    sp = cs.simulate(_tiny_tp_transformer(schedule), progress=False).spans
    d = sp[sp["device"] == "gpu0"]
    tp_f = d[(d["lane"] == "tp") & (d["phase"] == "F")]
    comp_b = d[(d["lane"] == "compute") & (d["phase"] == "B")]
    hidden = sum(
        max(0.0, min(a.end_s, b.end_s) - max(a.start_s, b.start_s))
        for a in tp_f.itertuples()
        for b in comp_b.itertuples()
    )
    return hidden, float((tp_f["end_s"] - tp_f["start_s"]).sum())


def test_pairs_run_one_chunks_tp_collectives_under_the_other_chunks_compute():
    # ZB-V issues each pass's kernels and collectives in one chain: nothing hides
    assert _forward_tp_under_backward_compute("zb_v")[0] == 0.0
    for schedule in ("dualpipe_v", "dualpipe"):
        hidden, total = _forward_tp_under_backward_compute(schedule)
        assert 0.3 * total < hidden <= total


@pytest.mark.parametrize("schedule,pp,m", [("dualpipe", 4, 8), ("dualpipe_v", 2, 4)])
def test_folded_agrees_with_unfolded(schedule, pp, m):
    # 32 GPUs on a 2:1 fat tree, dp 8 (dp 16): DualPipe's mirrored gradient sum meets two
    # stages' representatives when folded
    from tests.test_fold import _job

    times = []
    for fold in (False, True):
        raw = _job(4, pp, 2, fold=fold, m=m)
        raw["parallel"]["schedule"] = schedule
        raw["model"]["backward_weight"] = "1 ms"
        res = cs.simulate(raw, progress=False)
        assert res.summary["folded"].startswith("yes" if fold else "no")
        times.append(res.summary["iteration_time_s"])
    assert times[1] == pytest.approx(times[0], rel=1e-12)
