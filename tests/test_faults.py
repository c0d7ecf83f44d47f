"""Failures and elasticity (docs/faults.md): the job timeline against closed forms.

Iteration times come from simulating each configuration fault-free (what the timeline is
built on); everything else — checkpoint, restart, lost work, migration — must add up to
the job time exactly.
"""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.collections import LineCollection, PolyCollection

import clustersim as cs
from clustersim.faults.config import Config
from clustersim.faults.state import checkpoint_bytes, stage_state_bytes
from clustersim.faults.timeline import JobModel, JobTimeline
from clustersim.resolve import resolve
from clustersim.scenario.schema import FaultSpec
from clustersim.topology import build_topology
from clustersim.topology.routing import Router

LAYER_PARAMS = 1e9  # bytes of state per layer (synthetic: the whole state)
BW, LAT = 1e11, 1e-6  # the direct fabric: every transfer takes LAT + bytes / BW


def job(policy="checkpoint_restart", faults=(), batch=12, **recovery) -> dict:
    """4 nodes × 2 GPUs, pp 2 × dp 4 (stage 0 on nodes 0-1, stage 1 on nodes 2-3)."""
    return {
        "name": "faulty-synthetic",
        "cluster": {"nodes": 4, "gpus_per_node": 2, "intra_node": {"bandwidth": BW, "latency": LAT}},
        "model": {
            "kind": "synthetic",
            "layers": 2,
            "forward": 1e-3,
            "backward": 2e-3,
            "params": LAYER_PARAMS,
            "activation": 1e6,
        },
        "training": {"global_batch": batch},
        "parallel": {"pp": 2, "dp": 4},
        "simulation": {"network": "direct"},
        "faults": list(faults),
        "recovery": {
            "policy": policy,
            "job_iterations": 12,
            "checkpoint_every": 4,
            "storage_bandwidth": "1 GB/s",
            "restart_time": 3.0,
            "replan_time": 0.5,
            **recovery,
        },
    }


def iteration_time(raw: dict, **overrides) -> float:
    sc = cs.load_scenario(raw).with_overrides({"faults": [], "recovery": None, **overrides})
    return cs.simulate(sc, progress=False).summary["iteration_time_s"]


def durations(res, kind):
    rows = res.job[res.job["kind"] == kind]
    return list(rows["end_s"] - rows["start_s"])


def check_invariants(res, n: int):
    """Every useful iteration once; rows back to back; job time = their sum."""
    j = res.job
    assert sorted(j.loc[j["useful"], "iteration"].astype(int)) == list(range(n))
    assert not (j["useful"] & j["lost"]).any()
    assert list(j["start_s"].iloc[1:]) == list(j["end_s"].iloc[:-1])
    assert res.summary["job_time_s"] == pytest.approx(float((j["end_s"] - j["start_s"]).sum()), rel=1e-12)
    assert res.summary["useful_iterations"] == n


def test_checkpoint_bytes_of_a_synthetic_model_are_its_params():
    assert checkpoint_bytes(resolve(cs.load_scenario(job()))) == 2 * LAYER_PARAMS


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_checkpoint_holds_one_copy_of_zero_sharded_state(zero):
    # bf16 + Adam keep 2 B/param of weights and 12 of optimizer states (gradients are not
    # state); ZeRO 1 and 2 shard the 12 over dp, ZeRO 3 also the 2 (Rajbhandari et al. 2020).
    base = cs.load_scenario("scenarios/gpt-7.5b-32gpu-gpu-fail.yaml").with_overrides(
        {"faults": [], "recovery": None}
    )
    sharded = base.with_overrides({"parallel.zero": zero})
    dp = base.dp
    per_gpu = (2 / dp if zero >= 3 else 2) + 12 / dp
    for whole, part in zip(
        stage_state_bytes(resolve(base)), stage_state_bytes(resolve(sharded)), strict=True
    ):
        assert part == pytest.approx(whole * per_gpu / 14, rel=1e-12)
    assert checkpoint_bytes(resolve(sharded)) == pytest.approx(
        checkpoint_bytes(resolve(base)), rel=1e-12
    )  # the shards add up to one copy


def test_fault_free_job_is_iterations_plus_checkpoints():
    res = cs.simulate(job(), progress=False)
    t, c, n = iteration_time(job()), 2 * LAYER_PARAMS / 1e9, 12
    k = math.floor((n - 1) / 4)  # after iterations 4 and 8; none after the last
    assert durations(res, "checkpoint") == [pytest.approx(c, rel=1e-12)] * k
    assert res.summary["job_time_s"] == pytest.approx(n * t + k * c, rel=1e-9)
    assert res.summary["goodput_samples_per_s"] == pytest.approx(n * 12 / (n * t + k * c), rel=1e-9)
    assert res.summary["samples_per_s"] == pytest.approx(12 / t, rel=1e-12)
    check_invariants(res, n)


@pytest.mark.parametrize("x", [5.5, 4.0, 7.25])
def test_restart_loses_exactly_the_work_since_the_last_checkpoint(x):
    res = cs.simulate(job(faults=[{"kind": "gpu_fail", "gpu": 5, "at_iteration": x}]), progress=False)
    t, c, n = iteration_time(job()), 2.0, 12
    lost = (x - 4) * t  # the checkpoint after iteration 3 covers 4 iterations
    restart = 3.0 + c  # relaunch, then read the checkpoint back
    s = res.summary
    assert s["lost_work_s"] == pytest.approx(lost, rel=1e-9, abs=1e-15)
    assert s["restart_time_s"] == pytest.approx(restart, rel=1e-12)
    assert s["job_time_s"] == pytest.approx(n * t + 2 * c + lost + restart, rel=1e-9)
    assert s["goodput_samples_per_s"] == pytest.approx(n * 12 / s["job_time_s"], rel=1e-12)
    check_invariants(res, n)


def test_failure_before_the_first_checkpoint_restarts_from_scratch():
    res = cs.simulate(job(faults=[{"kind": "gpu_fail", "gpu": 0, "at_iteration": 2.5}]), progress=False)
    t = iteration_time(job())
    assert res.summary["lost_work_s"] == pytest.approx(2.5 * t, rel=1e-9)
    assert res.summary["restart_time_s"] == 3.0  # nothing to read back
    assert res.summary["job_time_s"] == pytest.approx(12 * t + 2 * 2.0 + 2.5 * t + 3.0, rel=1e-9)
    check_invariants(res, 12)


def test_failure_during_a_checkpoint_write_loses_the_partial_write():
    t = iteration_time(job())
    at = 8 * t + 2.0 + 0.75  # 0.75 s into the second checkpoint (after iteration 7)
    res = cs.simulate(job(faults=[{"kind": "gpu_fail", "gpu": 1, "at": at}]), progress=False)
    lost = 4 * t + 0.75
    assert res.summary["lost_work_s"] == pytest.approx(lost, rel=1e-9)
    assert res.summary["checkpoint_time_s"] == pytest.approx(2 * 2.0, rel=1e-12)  # completed ones only
    assert res.summary["job_time_s"] == pytest.approx(12 * t + 2 * 2.0 + lost + 3.0 + 2.0, rel=1e-9)
    check_invariants(res, 12)


def test_elastic_loses_the_partial_iteration_and_migrates_over_the_fabric():
    # GPU 2 is on node 1 (stage 0). 3 nodes stay: dp 3 fills them and splits batch 12.
    # New plan: logical node 1 holds one stage-0 and one stage-1 GPU; it goes to node 2,
    # whose first GPU must receive stage 0's state (1 layer) from GPU 0.
    res = cs.simulate(job("elastic", [{"kind": "gpu_fail", "gpu": 2, "at_iteration": 5.5}]), progress=False)
    t4, t3 = iteration_time(job()), iteration_time(job(), **{"cluster.nodes": 3, "parallel.dp": 3})
    migration = LAT + LAYER_PARAMS / BW
    s = res.summary
    assert s["dp"] == 4 and s["migration_time_s"] == pytest.approx(migration, rel=1e-12)
    assert s["lost_work_s"] == pytest.approx(0.5 * t4, rel=1e-9)
    assert s["replan_time_s"] == 0.5 and s["restart_time_s"] == 0.0
    expected = 5.5 * t4 + 1 * 2.0 + 0.5 + migration + 7 * t3 + 1 * 2.0  # checkpoints after iterations 4 and 8
    assert s["job_time_s"] == pytest.approx(expected, rel=1e-9)
    j = res.job
    assert set(j.loc[j["useful"] & (j["iteration"] >= 5), "config"]) == {"3 nodes, dp 3"}
    check_invariants(res, 12)


def test_elastic_node_join_grows_dp_at_the_next_boundary():
    base = job("elastic", [{"kind": "node_join", "nodes": 1, "at_iteration": 2.5}])
    base["cluster"]["nodes"], base["parallel"]["dp"] = 3, 3
    res = cs.simulate(base, progress=False)
    t3, t4 = iteration_time(base), iteration_time(base, **{"cluster.nodes": 4, "parallel.dp": 4})
    # dp 3 on nodes 0-2 holds stages [0 0 | 0 1 | 1 1]; dp 4 wants [0 0 | 0 0 | 1 1 | 1 1]:
    # GPU 3 receives stage 0, the joined GPUs 6 and 7 stage 1 — three 1-layer transfers at once
    mig = res.summary["migration_time_s"]
    assert mig == pytest.approx(LAT + LAYER_PARAMS / BW, rel=1e-12)
    assert "2.79 GiB" in res.job.loc[res.job["kind"] == "migration", "note"].item()  # 3 × 1e9 B
    assert res.summary["lost_work_s"] == 0.0
    assert res.summary["job_time_s"] == pytest.approx(3 * t3 + 9 * t4 + 2 * 2.0 + 0.5 + mig, rel=1e-9)
    check_invariants(res, 12)


def test_node_join_under_checkpoint_restart_waits_as_a_spare():
    res = cs.simulate(job(faults=[{"kind": "node_join", "nodes": 2, "at": 0.0}]), progress=False)
    assert res.summary["job_time_s"] == pytest.approx(12 * iteration_time(job()) + 2 * 2.0, rel=1e-9)
    assert "spares" in res.job.loc[res.job["kind"] == "join", "note"].item()


def test_link_fail_that_cuts_a_node_off_is_that_node_failing():
    one_nic = {"cluster": {**job()["cluster"], "nic": {"per_node": 1}}}
    cut = cs.simulate(
        {
            **job(faults=[{"kind": "link_fail", "link": ["node1.nic0", "leaf0"], "at_iteration": 5.5}]),
            **one_nic,
        },
        progress=False,
    )
    gpu = cs.simulate(
        {**job(faults=[{"kind": "gpu_fail", "gpu": 3, "at_iteration": 5.5}]), **one_nic}, progress=False
    )
    for key in ("job_time_s", "lost_work_s", "restart_time_s"):
        assert cut.summary[key] == gpu.summary[key]
    assert "cut off node(s) [1]" in cut.job.loc[cut.job["kind"] == "failure", "note"].item()


def test_link_fail_that_only_reroutes_changes_the_iteration_time_from_the_next_boundary():
    topo = {"kind": "fat_tree", "nodes_per_leaf": 2}
    base = job(faults=[{"kind": "link_fail", "link": ["leaf0", "spine0"], "at_iteration": 2.5}])
    base["cluster"]["topology"] = topo
    # packet network: flows share the surviving spine, so losing leaf0–spine0 slows the
    # all-reduce (an analytical network prices each route alone and would not notice)
    base["simulation"]["network"] = "packet"
    t = iteration_time(base)
    t_down = iteration_time(base, **{"cluster.failed_links": [["leaf0", "spine0"]]})
    assert t_down > t
    res = cs.simulate(base, progress=False)
    assert res.summary["lost_work_s"] == 0.0
    assert res.summary["job_time_s"] == pytest.approx(3 * t + 9 * t_down + 2 * 2.0, rel=1e-9)
    check_invariants(res, 12)


def test_job_timeline_is_saved_and_loaded_back(tmp_path):
    res = cs.simulate(job(faults=[{"kind": "gpu_fail", "gpu": 5, "at_iteration": 5.5}]), progress=False)
    back = cs.load_result(res.save(tmp_path, plots=False))
    pd.testing.assert_frame_equal(back.job, res.job, rtol=1e-15)
    assert back.summary["job_time_s"] == res.summary["job_time_s"]


def test_same_scenario_same_timeline():
    raw = job("elastic", [{"kind": "gpu_fail", "gpu": 2, "at": 0.05}])
    a, b = cs.simulate(raw, progress=False), cs.simulate(raw, progress=False)
    assert a.job.equals(b.job) and a.summary["job_time_s"] == b.summary["job_time_s"]


@pytest.mark.parametrize(
    "raw_update,message",
    [
        (
            {"faults": [{"kind": "gpu_fail", "gpu": 8, "at": 1.0}]},
            "faults[0].gpu: 8 is invalid; GPU indices run from 0 to 7",
        ),
        (
            {"recovery": None, "faults": [{"kind": "gpu_fail", "gpu": 1, "at": 1.0}]},
            "recovery: None is invalid; faults need a recovery section",
        ),
        (
            {"faults": [{"kind": "gpu_fail", "gpu": 1, "at": 1.0, "at_iteration": 2}]},
            "give exactly one of at (a job time, e.g. '30 min') or at_iteration",
        ),
        ({"faults": [{"kind": "gpu_fail", "link": ["a", "b"], "at": 1.0}]}, "a gpu_fail fault needs gpu"),
        (
            {"faults": [{"kind": "node_join", "nodes": 1, "gpu": 3, "at": 1.0}]},
            "gpu belongs to gpu_fail faults; a node_join fault takes nodes",
        ),
        ({"faults": [{"kind": "disk_fail", "gpu": 1, "at": 1.0}]}, "faults[0].kind"),
    ],
)
def test_bad_faults_are_named(raw_update, message):
    with pytest.raises(cs.ScenarioError) as e:
        cs.load_scenario({**job(), **raw_update})
    assert message in str(e.value)


def test_elastic_with_zero_is_refused():
    raw = job("elastic")
    raw["parallel"]["zero"] = 1
    with pytest.raises(
        cs.ScenarioError, match="recovery.policy: 'elastic' is invalid; with parallel.zero = 1"
    ):
        cs.load_scenario(raw)


def test_elastic_without_a_holder_of_a_stage_is_refused():
    raw = job("elastic", [{"kind": "gpu_fail", "gpu": 0, "at": 0.0}])
    raw["cluster"]["gpus_per_node"], raw["cluster"]["nodes"] = 4, 2  # node 0 holds all of stage 0
    with pytest.raises(cs.ScenarioError, match=r"faults\[0\].*no surviving GPU holds the state of stage 0"):
        cs.simulate(raw, progress=False)


def test_elastic_without_a_fitting_dp_is_refused():
    raw = job("elastic", [{"kind": "gpu_fail", "gpu": 5, "at": 0.0}], batch=6)
    raw["cluster"]["nodes"], raw["parallel"] = 3, {"pp": 3, "dp": 2}  # 4 GPUs left: no dp fills whole nodes
    raw["model"]["layers"] = 3
    with pytest.raises(cs.ScenarioError, match="elastic re-plan impossible: on 2 node"):
        cs.simulate(raw, progress=False)


def test_elastic_replan_takes_the_largest_dp_the_schedule_accepts():
    # 6 one-GPU nodes, pp 2 × dp 3, interleaved (2 chunks per GPU), 6 micro-batches. One GPU
    # fails: 5 nodes take dp 2 at most, but 6 / 2 = 3 micro-batches is no multiple of pp = 2,
    # which the interleaved schedule refuses; dp 1 (6 micro-batches) runs
    raw = job("elastic", [{"kind": "gpu_fail", "gpu": 5, "at_iteration": 1.5}], batch=6)
    raw["cluster"].update(nodes=6, gpus_per_node=1)
    raw["model"]["layers"] = 4
    raw["parallel"] = {"pp": 2, "dp": 3, "schedule": "interleaved", "virtual_stages": 2}
    with pytest.raises(cs.ScenarioError):
        cs.load_scenario(raw).with_overrides(
            {"faults": [], "recovery": None, "parallel.dp": 2, "cluster.nodes": 4}
        )
    res = cs.simulate(raw, progress=False)
    assert res.job.loc[res.job["kind"] == "replan", "note"].iloc[0].endswith("dp 1")


def test_unknown_link_is_named():
    raw = job(faults=[{"kind": "link_fail", "link": ["leaf0", "moon"], "at": 0.0}])
    with pytest.raises(
        cs.ScenarioError, match=r"faults\[0\].link: \['leaf0', 'moon'\] is invalid; no link joins"
    ):
        cs.simulate(raw, progress=False)


def one_gpu_on_a_switch() -> dict:
    """gpu0 – sw0, that cable already down: a one-GPU job on a graph with no links."""
    raw = job()
    raw["cluster"].update(
        nodes=1,
        gpus_per_node=1,
        failed_links=[["gpu0", "sw0"]],
        topology={
            "kind": "custom",
            "nodes": [{"name": "sw0", "kind": "switch"}],
            "links": [{"src": "gpu0", "dst": "sw0", "bandwidth": BW}],
        },
    )
    raw["parallel"], raw["model"]["layers"], raw["training"]["global_batch"] = {"pp": 1, "dp": 1}, 1, 1
    return raw


@pytest.mark.parametrize(
    "earlier,where",
    [
        ([], "cluster.failed_links[0]"),
        ([{"kind": "link_fail", "link": ["sw0", "gpu0"], "at_iteration": 0.5}], "faults[0]"),
    ],
)
def test_link_fail_on_a_link_already_down_is_named(earlier, where):
    raw = one_gpu_on_a_switch()
    if earlier:
        raw["cluster"]["failed_links"] = []
    k = len(earlier)
    raw["faults"] = [*earlier, {"kind": "link_fail", "link": ["gpu0", "sw0"], "at_iteration": 1.5}]
    with pytest.raises(cs.ScenarioError) as e:
        cs.simulate(raw, progress=False)
    assert e.value.field == f"faults[{k}].link" and e.value.value == ["gpu0", "sw0"]
    assert str(e.value).endswith(f"the link is already down ({where}); a link fails once")


def test_folding_refuses_failed_links():
    raw = job()
    raw["cluster"]["failed_links"] = [["leaf0", "spine0"]]
    raw["cluster"]["topology"] = {"kind": "fat_tree", "nodes_per_leaf": 2}
    raw["simulation"] = {"network": "analytical", "fold": True}
    with pytest.raises(
        cs.ScenarioError, match="cannot fold this scenario: failed links make replicas' routes differ"
    ):
        cs.simulate(raw, progress=False)


def test_shipped_scenario_restart_vs_elastic():
    sc = cs.load_scenario("scenarios/gpt-7.5b-32gpu-gpu-fail.yaml")
    restart = cs.simulate(sc, progress=False)
    elastic = cs.simulate(sc.with_overrides({"recovery.policy": "elastic"}), progress=False)
    s, t, n = restart.summary, restart.summary["iteration_time_s"], 40
    c = s["checkpoint_bytes"] / 50e9
    assert s["checkpoint_bytes"] == pytest.approx(
        7.5e9 * 14, rel=0.01
    )  # bf16 weights + fp32 Adam: 14 B/param
    assert s["job_time_s"] == pytest.approx(n * t + 9 * c + 1.5 * t + 300 + c, rel=1e-9)
    assert elastic.summary["lost_work_s"] == pytest.approx(0.5 * t, rel=1e-9)
    # Stage 0 (tp 4 × dp 4) is nodes 0-1, stage 1 nodes 2-3; node 1 leaves. dp 3 on 3 nodes puts
    # stage 0 on logical GPUs 0-11, stage 1 on 12-23: logical node 0 → node 0, logical node 1
    # (stage 0 ranks 0-3, then stage 1 ranks 0-3) → node 2 (its GPUs 20-23 already hold stage 1
    # ranks 0-3; node 3 ties, the lower index wins), logical node 2 → node 3. So GPUs 16-19 receive
    # stage 0's tp ranks 0-3 from GPUs 0-3, all at once: on the analytical network each takes
    # its route's latency + bytes / bottleneck bandwidth, independent of the others.
    three = sc.with_overrides({"cluster.nodes": 3, "parallel.dp": 3, "faults": [], "recovery": None})
    stage0 = stage_state_bytes(resolve(three))[0]
    assert 4 * sum(stage_state_bytes(resolve(three))) == pytest.approx(
        s["checkpoint_bytes"], rel=1e-12
    )  # tp 4 shards
    router = Router(build_topology(sc.cluster.model_dump()))
    routes = [router.cost(f"gpu{src}", f"gpu{src + 16}") for src in range(4)]
    migration = max(lat + stage0 / bw for lat, bw in routes)
    assert elastic.summary["migration_time_s"] == pytest.approx(migration, rel=1e-12)
    moved = elastic.job.loc[elastic.job["kind"] == "migration", "note"].item()
    assert f"{4 * stage0 / 2**30:.3g} GiB" in moved
    for res in (restart, elastic):
        check_invariants(res, n)
        assert res.summary["goodput_samples_per_s"] < res.summary["samples_per_s"]


def test_plot_job_draws_one_row_per_job():
    from clustersim.viz.job import plot_job

    res = cs.simulate(job("elastic", [{"kind": "gpu_fail", "gpu": 2, "at_iteration": 5.5}]), progress=False)
    fig = plot_job({"elastic": res.job, "again": res.job})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["elastic", "again"]
    assert ax.get_xlim()[1] >= res.summary["job_time_s"]
    # one collection per row and segment kind: together they hold every timed segment of each row once
    j = res.job[res.job["end_s"] > res.job["start_s"]]
    bars = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bars) == 2 * j["kind"].where(~j["lost"], "lost").nunique()
    # (row, start, end) of each drawn bar; a bar is 0.6 high, centred on its row
    spans = sorted(
        (p.vertices[:, 1].min() + 0.3, p.vertices[:, 0].min(), p.vertices[:, 0].max())
        for c in bars
        for p in c.get_paths()
    )
    rows = sorted((y, a, b) for y in (0, 1) for a, b in zip(j["start_s"], j["end_s"], strict=True))
    assert [x for s in spans for x in s] == pytest.approx([x for r in rows for x in r], rel=1e-12, abs=1e-12)
    (ticks,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(ticks.get_segments()) == 2 * res.job["kind"].isin(["failure", "join", "reroute"]).sum()


def test_elastic_replan_that_runs_out_of_memory_is_refused():
    # GPipe keeps all m micro-batches' activations: m = 3 fits in 80 GiB, m = 4 after dp 4 → 3 does not
    raw = job("elastic", [{"kind": "gpu_fail", "gpu": 2, "at": 0.0}])
    raw["model"]["activation"], raw["parallel"]["schedule"] = 25e9, "gpipe"
    assert not cs.simulate({**raw, "faults": [], "recovery": None}, progress=False).summary["oom"]
    with pytest.raises(
        cs.ScenarioError, match="after a re-plan to 3 nodes, dp 3 the GPUs cannot hold the model"
    ):
        cs.simulate(raw, progress=False)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 60),
    k=st.integers(1, 12),
    t=st.floats(1e-3, 10),
    c=st.floats(0, 10),
    r=st.floats(0, 100),
    frac=st.floats(0, 1, exclude_max=True),
    quarter=st.integers(0, 3),
)
def test_restart_closed_form_holds_for_any_fault_position(n, k, t, c, r, frac, quarter):
    """N·T + K·C + lost + R for one failure anywhere in the job (timeline alone, stub times)."""
    x = frac * n if quarter else math.floor(frac * n)  # also exactly at iteration starts
    rec = cs.load_scenario(job()).recovery.model_copy(
        update={"job_iterations": n, "checkpoint_every": k, "restart_time": r}
    )
    fault = FaultSpec(kind="gpu_fail", gpu=0, at_iteration=x)
    model = JobModel(
        iteration_time=lambda cfg: t,
        replan=None,
        cut_off=None,
        checkpoint_write_s=c,
        checkpoint_read_s=c,
        gpus_per_node=2,
    )
    rows = pd.DataFrame(JobTimeline(rec, [fault], model, Config(phys=(0, 1), dp=1), 2).run())
    last = k * math.floor(x / k)  # iterations the last checkpoint before the fault covers
    lost, restart = (x - last) * t, r + (c if last else 0.0)
    assert sorted(rows.loc[rows["useful"], "iteration"]) == list(range(n))
    assert rows["end_s"].iloc[-1] == pytest.approx(
        n * t + (n - 1) // k * c + lost + restart, rel=1e-9, abs=1e-12
    )
    dur = rows["end_s"] - rows["start_s"]
    assert dur[rows["lost"]].sum() == pytest.approx(lost, rel=1e-9, abs=1e-12)


def test_fault_during_a_restart_strikes_when_the_restart_ends():
    t = iteration_time(job())
    first = {"kind": "gpu_fail", "gpu": 5, "at_iteration": 5.5}
    during = {"kind": "gpu_fail", "gpu": 1, "at": 5.5 * t + 2.0 + 1.0}  # 1 s into the 5 s restart
    res = cs.simulate(job(faults=[first, during]), progress=False)
    restart = 3.0 + 2.0
    assert res.summary["restart_time_s"] == pytest.approx(2 * restart, rel=1e-12)  # nothing more is lost
    assert res.summary["job_time_s"] == pytest.approx(12 * t + 2 * 2.0 + 1.5 * t + 2 * restart, rel=1e-9)
    failures = res.job[res.job["kind"] == "failure"]
    assert failures["start_s"].iloc[1] == pytest.approx(5.5 * t + 2.0 + restart, rel=1e-12)
    check_invariants(res, 12)


@pytest.mark.parametrize(
    "override,match",
    [
        ({"cluster.node_groups": [{"nodes": 2}, {"nodes": 2, "speed": 0.8}]}, "with mixed node groups"),
        ({"cluster.stragglers": [{"gpus": [3], "slowdown": 2}]}, "with stragglers"),
        ({"cluster.failed_links": [["node1.nic0", "leaf0"]]}, "with failed links"),
    ],
)
def test_elastic_refuses_settings_tied_to_the_original_cluster(override, match):
    sc = cs.load_scenario("scenarios/gpt-7.5b-32gpu-gpu-fail.yaml")
    with pytest.raises(
        cs.ScenarioError,
        match=f"recovery.policy: 'elastic' is invalid; elastic re-planning is not "
        f"supported {match}.*accepted: checkpoint_restart",
    ):
        sc.with_overrides({"recovery.policy": "elastic", **override})


@pytest.mark.parametrize("policy", ["checkpoint_restart", "elastic"])
def test_degradation_windows_are_refused_in_a_job(policy):
    # a job runs each configuration from t = 0: a window's absolute times would strike
    # every configuration's first iterations, not the job's clock
    sc = cs.load_scenario("scenarios/gpt-7.5b-32gpu-gpu-fail.yaml")
    window = [{"between": ["gpu0", "nvswitch0"], "start": 0, "end": 1, "factor": 0.5}]
    with pytest.raises(
        cs.ScenarioError,
        match="cluster.link_degradations: .* is invalid; degradation windows are times of one simulation",
    ):
        sc.with_overrides(
            {
                "recovery.policy": policy,
                "cluster.link_degradations": window,
                "simulation.collective_model": "fabric",
            }
        )


def test_inference_takes_no_faults():
    sc = cs.load_scenario("scenarios/edgepipe-vit-large-4xT4-1GbE.yaml")
    with pytest.raises(cs.ScenarioError, match="faults and recovery model training jobs"):
        sc.with_overrides({"recovery": {"policy": "checkpoint_restart", "job_iterations": 10}})


@pytest.mark.parametrize(
    "gpu,link", [(2, ["node1.nic0", "leaf0"]), (2, ["node3.nic0", "leaf0"]), (30, ["node1.nic0", "leaf0"])]
)  # the last node leaves: order kept
def test_a_link_fault_after_an_elastic_replan_is_refused_whether_it_cuts_or_reroutes(gpu, link):
    sc = cs.load_scenario("scenarios/gpt-7.5b-32gpu-gpu-fail.yaml")
    faults = [
        {"kind": "gpu_fail", "gpu": gpu, "at_iteration": 2.5},
        {"kind": "link_fail", "link": link, "at_iteration": 5.5},
    ]
    with pytest.raises(
        cs.ScenarioError,
        match=r"faults\[1\].link: .* a link_fail after an elastic re-plan is "
        r"not modelled",
    ):
        cs.simulate(sc.with_overrides({"recovery.policy": "elastic", "faults": faults}), progress=False)


@pytest.mark.parametrize(
    "framework,zero,writers",
    [
        ("megatron_2021", 0, 1),  # DDP: replica 0 writes everything
        ("deepspeed", 1, 4),  # ZeRO-1/2: every replica its optimizer shard, replica 0 the weights
        ("deepspeed", 2, 4),
        ("megatron_core", 0, 4),  # the distributed optimizer: as ZeRO-1
        ("deepspeed", 3, 4),  # ZeRO-3 and FSDP: every replica its shard of both
        ("fsdp2", 3, 4),
    ],
)
def test_checkpoint_is_the_ranks_shards_and_14_bytes_per_parameter(framework, zero, writers):  # 12 for FSDP2
    from clustersim.faults.state import rank_checkpoint_bytes
    from clustersim.workload.resolve import resolve_transformer

    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {"training.framework": framework, "parallel.zero": zero, "parallel.dp": 4, "cluster.nodes": 4}
    )
    job = resolve(sc)
    per_rank = rank_checkpoint_bytes(job)
    # bf16 weights (2) + fp32 master weights and Adam's m, v (12): one copy of the model's
    # state — and of what each TP rank holds whole (norms, position embeddings: 0.3 % here),
    # one per TP rank, as Megatron's per-rank model files keep them. FSDP2's parameter is the
    # fp32 master itself: 4 + Adam's 8 = 12, no bf16 copy to write
    params = resolve_transformer(sc.model).params()
    per_param = 12 if framework == "fsdp2" else 14
    assert checkpoint_bytes(job) == pytest.approx(per_param * params, rel=0.005)
    plan = job.plan
    replicas = np.array([plan.coords(d)[1] for d in range(plan.num_devices)])
    assert len(set(replicas[per_rank > 0])) == writers  # who writes: the first copy of each shard
    if zero == 3:  # a full shard per rank: every GPU of a stage writes the same bytes
        stage = np.array([plan.coords(d)[0] for d in range(plan.num_devices)])
        for s in range(plan.pp):
            assert np.ptp(per_rank[stage == s]) < 1e-6 * per_rank[stage == s].max()
