"""Failures drawn at rates over a long job (docs/fleet.md): the job-level process against
the failure-free job, the configured rates and Young/Daly's optimum interval."""

import math

import numpy as np
import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.faults.interval_study import best_band, goodput_curve, young_daly_interval
from clustersim.faults.rates import studies
from clustersim.faults.renewal import FleetJob, simulate

HOUR = 3600.0


def job(failures=None, policy="checkpoint_restart", **recovery) -> dict:
    """4 nodes × 2 GPUs, pp 2 × dp 4, a synthetic model (1 GB of state per layer)."""
    rec = {
        "policy": policy,
        "job_iterations": 20_000,
        "checkpoint_every": 500,
        "storage_bandwidth": "1 GB/s",
        "restart_time": 3.0,
        "replan_time": 0.5,
        **recovery,
    }
    if failures is not None:
        rec["failures"] = failures
    return {
        "name": "fleet-synthetic",
        "cluster": {"nodes": 4, "gpus_per_node": 2, "intra_node": {"bandwidth": 1e11, "latency": 1e-6}},
        "model": {
            "kind": "synthetic",
            "layers": 2,
            "forward": 1e-3,
            "backward": 2e-3,
            "params": 1e9,
            "activation": 1e6,
        },
        "training": {"global_batch": 12},
        "parallel": {"pp": 2, "dp": 4},
        "simulation": {"network": "direct"},
        "recovery": rec,
    }


def test_zero_rates_equal_the_failure_free_job():
    """Rates all zero: the job time is the scripted timeline's with no faults — N·T plus
    the checkpoint writes — and nothing is lost."""
    free = cs.simulate(job())
    drawn = cs.simulate(job({"mtbf": {"gpu": 0, "node": 0}, "seeds": 3}))
    assert drawn.summary["failures"] == 0 and drawn.job.empty
    assert drawn.summary["job_time_s"] == pytest.approx(free.summary["job_time_s"], rel=1e-9)
    assert drawn.summary["checkpoint_time_s"] == pytest.approx(free.summary["checkpoint_time_s"], rel=1e-9)
    assert drawn.summary["lost_work_s"] == 0 and drawn.summary["down_time_s"] == 0
    assert drawn.summary["iteration_time_s"] == free.summary["iteration_time_s"]


def test_measured_mtbf_matches_the_configured_rate():
    """Over many seeds the failures counted per second of job time estimate Λ: with n
    failures the estimate's relative standard deviation is 1/√n (Poisson); 4σ. Each class
    takes its share λ_c/Λ of them (binomial, 4σ)."""
    rates = {"gpu": 3e-4, "node": 1e-4}
    fj = FleetJob(work_s=5e5, rates=rates, interval_s=600.0, write_s=5.0, restart_s=120.0, detection_s=60.0)
    outs = [simulate(fj, s) for s in range(40)]
    n = sum(o.failures for o in outs)
    measured = sum(o.job_time_s for o in outs) / n
    assert abs(measured * sum(rates.values()) - 1) < 4 / math.sqrt(n)
    gpu = sum(r[1] == "gpu" for o in outs for r in o.rows)
    p = 0.75
    assert abs(gpu / n - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_scenario_mtbf_from_the_study_rows():
    """A study's per-unit MTBF is units × hours / failures of its rows; the scenario's
    rate is its count of units over that (Llama 3: 268 GPU failures over 16,384 GPUs in
    54 days)."""
    llama = studies()["llama3_405b"]
    assert llama["gpu"] == pytest.approx(16384 * 54 * 24 * HOUR / 268)
    res = cs.simulate(job({"study": "llama3_405b", "seeds": 2}))
    per_h = res.summary["failure_rates_per_h"]
    assert per_h["gpu"] == pytest.approx(8 * HOUR / llama["gpu"])
    assert per_h["node"] == pytest.approx(4 * HOUR / llama["node"])
    assert "link" not in per_h  # the study counts cables with switches, per GPU
    assert res.summary["mtbf_configured_s"] == pytest.approx(1 / sum(per_h.values()) * HOUR)


def test_young_daly_inside_the_best_intervals_band():
    """δ = 10 s ≪ MTBF = 10⁴ s: the simulated goodput curve's best interval's confidence
    band holds √(2·δ·MTBF) = 447 s."""
    fj = FleetJob(work_s=1e6, rates={"gpu": 1e-4}, write_s=10.0, restart_s=60.0)
    tau = young_daly_interval(fj)
    assert tau == pytest.approx(math.sqrt(2 * 10.0 * 1e4))
    curve = goodput_curve(fj, [100, 200, 300, 400, 450, 500, 600, 800, 1200, 2000], seeds=24)
    lo, hi = best_band(curve)
    assert lo <= tau <= hi
    assert hi / lo < 3  # the band is a finding, not the whole grid


def test_hot_spares_skip_the_replacement_wait():
    """With a spare always back in time, no failure waits ``replacement``; without one,
    every hardware failure does."""
    base = dict(work_s=3e5, rates={"gpu": 2e-4}, interval_s=600.0, write_s=5.0, restart_s=30.0)
    none = simulate(FleetJob(**base, replacement_s=3600.0), 7)
    spare = simulate(FleetJob(**base, replacement_s=3600.0, spares=1, repair_s=1.0), 7)
    completed = [r for r, nxt in zip(none.rows, [*none.rows[1:], None]) if nxt is None or not nxt[4]]
    assert completed and all(r[3] >= 3600.0 for r in completed)  # (others: cut by a failure)
    assert all(r[3] < 3600.0 for r in spare.rows)
    assert spare.job_time_s < none.job_time_s


def test_async_checkpoints_cost_the_snapshot_only():
    """No failures: an asynchronous write stops the job s per checkpoint (upload C < τ)."""
    fj = FleetJob(work_s=1000.0, rates={}, interval_s=100.0, write_s=20.0, snapshot_s=0.5)
    assert simulate(fj, 0).job_time_s == pytest.approx(1000.0 + 9 * 0.5)
    slow = FleetJob(work_s=1000.0, rates={}, interval_s=100.0, write_s=130.0, snapshot_s=0.5)
    assert simulate(slow, 0).job_time_s == pytest.approx(1000.0 + 9 * (0.5 + 30.0))


def test_elastic_with_zero_rates_is_the_failure_free_job():
    """Elastic bookkeeping (work position, checkpoints written) gives the failure-free job
    time exactly: W + (⌈W/τ⌉ − 1)·C, here with W a multiple of τ and not."""
    for work in (1000.0, 1050.0):
        fj = FleetJob(work_s=work, rates={}, interval_s=100.0, write_s=7.0, iteration_time=lambda d: 0.5)
        out = simulate(fj, 0)
        assert out.job_time_s == pytest.approx(fj.run_time(work), rel=1e-15)
        assert out.checkpoint_s == pytest.approx(fj.run_time(work) - work, rel=1e-15)
    free = cs.simulate(job())
    drawn = cs.simulate(job({"mtbf": {"gpu": 0}}, policy="elastic"))
    assert drawn.summary["job_time_s"] == pytest.approx(free.summary["job_time_s"], rel=1e-9)


def elastic_job(t_it: dict[int, float], **fields) -> FleetJob:
    """An elastic 4-node job of 20,000 s of work whose iteration takes ``t_it[d]`` with ``d``
    nodes out (none fits beyond), with ``fields`` (rates, repair, …) added."""
    return FleetJob(
        work_s=20_000.0,
        interval_s=500.0,
        write_s=5.0,
        detection_s=30.0,
        replan_s=10.0,
        nodes=4,
        iteration_time=lambda d: t_it.get(d, math.inf),
        **fields,
    )


def test_elastic_keeps_the_work_between_failures():
    """A node failure at x keeps every finished iteration: the job ends later than the
    failure-free one by the pauses, the lost partial iterations and the slower iterations
    while a node is out — and each of those is accounted for."""
    fj = elastic_job({0: 1.0, 1: 4.0 / 3.0}, rates={"node": 1 / 4000}, repair_s=300.0)
    out = simulate(fj, 11)
    assert out.failures > 0
    assert all(r[2] < 4.0 / 3.0 for r in out.rows)  # at most one (slowed) iteration lost each
    assert out.job_time_s > fj.run_time(fj.work_s) + out.down_s


def test_elastic_loses_only_partial_iterations():
    """Elastic: lost work per failure is below one iteration time; with rates zero the job
    equals the failure-free one."""
    res = cs.simulate(job({"mtbf": {"node": "0.5 h"}, "repair_time": "0.05 h", "seeds": 2}, policy="elastic"))
    t_it = res.summary["iteration_time_s"]
    assert len(res.job) > 0 and (res.job["lost_s"] < t_it * 1.0001).all()
    assert res.summary["job_time_s"] > 20_000 * t_it


@pytest.mark.parametrize(
    "failures, field",
    [
        ({"study": "nope"}, "recovery.failures.study"),
        ({}, "recovery.failures"),
        ({"mtbf": {"gpus": "1 h"}}, "recovery.failures.mtbf"),
        ({"mtbf": {"gpu": "1 h"}, "checkpoint_write": "async"}, "recovery.failures"),
        ({"mtbf": {"gpu": "-1 h"}}, "recovery.failures.mtbf.gpu"),
    ],
)
def test_bad_failures_are_refused(failures, field):
    with pytest.raises(ScenarioError) as err:
        cs.simulate(job(failures))
    assert str(err.value).startswith(field)


def test_elastic_refuses_spares():
    with pytest.raises(ScenarioError, match="recovery.failures.spares"):
        cs.load_scenario(job({"mtbf": {"gpu": "10 h"}, "spares": 2}, policy="elastic"))


def test_failures_and_scripted_faults_exclude_each_other():
    raw = job({"mtbf": {"gpu": "10 h"}})
    raw["faults"] = [{"kind": "gpu_fail", "gpu": 1, "at_iteration": 3}]
    with pytest.raises(ScenarioError, match="recovery.failures"):
        cs.load_scenario(raw)


def test_seeded_runs_repeat():
    a = simulate(FleetJob(work_s=1e5, rates={"gpu": 1e-3, "nic": 1e-4}, interval_s=300.0, write_s=2.0), 3)
    b = simulate(FleetJob(work_s=1e5, rates={"gpu": 1e-3, "nic": 1e-4}, interval_s=300.0, write_s=2.0), 3)
    assert a.rows == b.rows and a.job_time_s == b.job_time_s
    assert np.isfinite(a.job_time_s)


def test_pictures_and_bundle(tmp_path):
    """A rate run saves its failure table and draws it; the goodput curve draws with the
    Young/Daly line."""
    from clustersim.viz.fleet import plot_goodput_curve

    res = cs.simulate(job({"mtbf": {"gpu": "2 h", "software": "5 h"}, "seeds": 3}))
    out = res.save(tmp_path / "bundle")
    assert (out / "job.csv").exists() and (out / "job.png").exists()
    assert len(cs.load_result(out).job) == len(res.job) > 0
    curve = goodput_curve(res.fleet, [50, 100, 200], seeds=2)
    fig = plot_goodput_curve(curve, young_daly_interval(res.fleet))
    assert len(fig.axes[0].lines) == 2


def test_job_energy_with_an_energy_section():
    """A rate run with an energy section: the job's energy is its running time at the
    step's power plus its time down at the idle cluster's."""
    sc = cs.load_scenario("scenarios/quickstart.yaml").with_overrides(
        {
            "energy": {"pue": 1.3, "switch_power": 500},
            "recovery": {
                "job_iterations": 50_000,
                "checkpoint_every": 1000,
                "storage_bandwidth": "10 GB/s",
                "restart_time": "2 min",
                "failures": {"mtbf": {"node": "2 h"}, "seeds": 2},
            },
        }
    )
    s = cs.simulate(sc).summary
    running = s["job_time_s"] - s["down_time_s"]
    assert s["down_time_s"] > 0
    expected = running * s["energy_per_step_j"] / s["iteration_time_s"] + s["down_time_s"] * s["idle_power_w"]
    assert s["job_energy_j"] == pytest.approx(expected, rel=1e-12)
    tokens = 50_000 * s["tokens_per_s"] * s["iteration_time_s"]
    assert s["job_energy_per_token_j"] == pytest.approx(s["job_energy_j"] / tokens, rel=1e-12)
    assert s["job_energy_per_token_j"] > s["energy_per_token_j"]  # failures cost energy too


@pytest.mark.parametrize(("gpus", "hours", "printed"), [(16_384, 1.8, 0.05), (131_072, 0.23, 0.005)])
def test_meta_rsc1_rate_gives_the_papers_mttf_projection(gpus, hours, printed):
    """Kokolis et al. (HPCA 2025) model a job's MTTF as (N_nodes · r_f)⁻¹ with RSC-1's
    r_f = 6.50 failures per 1000 node-days and project 1.8 h at 16,384 GPUs and 0.23 h at
    131,072 (8 GPUs a server); the shipped row gives the same within the printed digits."""
    per_node = studies()["meta_rsc1"]["node"]
    assert per_node == pytest.approx(1000 * 24 * HOUR / 6.50, rel=1e-12)
    assert per_node / (gpus // 8) / HOUR == pytest.approx(hours, abs=printed)
    assert studies()["meta_rsc2"]["node"] == pytest.approx(1000 * 24 * HOUR / 2.34, rel=1e-12)
    # a scenario with the study: its 4 nodes' node-class rate, nothing else
    per_h = cs.simulate(job({"study": "meta_rsc1"})).summary["failure_rates_per_h"]
    assert per_h == {"node": pytest.approx(4 * HOUR / per_node, rel=1e-12)}
