"""The estimate of a run ``simulate`` evaluates as replicas of its folded Program
(clustersim/compilers/pipeline/replicas.py) prices it as it runs: the folded evaluation plus the spans
expanded to every twin — its ops are the ops the run records, its events the events the
folded pass evaluates — and a large unfolded run that replication makes cheap is neither
refused by the budget nor advised to fold."""

from __future__ import annotations

from pathlib import Path

import pytest

import clustersim as cs
from clustersim.resolve import resolve
from clustersim.resolve.estimate import ADVICE_S, advice, check_budget, estimate
from clustersim.resolve.replication import replica_obstacle
from clustersim.simulate import run_job

ROOT = Path(__file__).resolve().parent.parent
FAST = {"network": "analytical", "collective_model": "analytical", "granularity": "stage"}


def _gpt13b(fold) -> dict:
    """GPT 1.3B on 128 A100 (TP 2, PP 4, DP 16), contention-free: replicated when unfolded."""
    return {
        "name": "gpt-1.3b-128",
        "cluster": {"preset": "dgx_a100", "nodes": 16},
        "model": {"preset": "gpt-1.3b", "seq_len": 1024},
        "training": {"global_batch": 128, "micro_batch": 1},
        "parallel": {"tp": 2, "pp": 4, "dp": 16, "schedule": "1f1b"},
        "simulation": {**FAST, "fold": fold},
    }


def test_a_replicated_estimate_counts_the_recorded_ops_and_the_folded_events():
    job = resolve(cs.load_scenario(_gpt13b(False)))
    assert replica_obstacle(job, "pipeline") is None
    est, folded = estimate(job, mode_name="pipeline"), estimate(resolve(cs.load_scenario(_gpt13b(True))))
    assert est.replicas == 2 * 16
    assert est.ops == folded.ops * 32 and est.events == folded.events  # the twins' rows, the folded work
    unfolded = run_job(job)
    assert unfolded.summary["evaluator"].startswith("dag ×32 replicas")
    events = run_job(resolve(cs.load_scenario(_gpt13b(True)))).summary["sim_events"]
    # within the 2× that tests/test_estimate.py holds every estimate to
    assert 0.5 <= est.ops / len(unfolded.spans) <= 2, (est.ops, len(unfolded.spans))
    assert 0.5 <= est.events / events <= 2, (est.events, events)
    # not replicated (one job of a multi-job run; mode unknown): priced as the unfolded
    # engine would run it, whose events the replicated run reports (compilers/pipeline/replicas.py)
    plain = estimate(job)
    assert plain.replicas == 1 and 0.5 <= plain.events / unfolded.summary["sim_events"] <= 2
    assert plain.events > 16 * est.events


def test_a_large_unfolded_run_that_is_replicated_is_not_refused_or_advised_to_fold():
    """GPT-3 175B on 1,024 A100 unfolded at the fast fidelity: ~1.9 M ops recorded, but ~30 k
    evaluated (~6 s, the run ~5 s); a budget of 1 M events refuses it only where it would not
    be replicated, and the estimate is under the minute past which advice is printed."""
    sc = cs.load_scenario(ROOT / "scenarios" / "gpt3-175b-1024xa100-balanced.yaml").with_overrides(
        {"simulation.fidelity": "fast", "simulation.fold": False, "simulation.max_events": 1_000_000}
    )
    job = resolve(sc)
    est = check_budget(job, "pipeline")
    assert est.replicas == 64 and est.events < 100_000 < 1_000_000 < est.ops
    assert est.seconds < ADVICE_S  # so the run's estimate line carries no advice (simulate._announce)
    assert "evaluated × 64 replicas" in est.line()
    unfolded = estimate(job)  # priced as an unfolded run that is not replicated:
    assert unfolded.seconds > 5 * est.seconds
    assert any(tip.startswith("simulation.fold: true") for tip in advice(job))
    with pytest.raises(cs.ScenarioError, match="simulation.max_events"):
        check_budget(job)  # and past the budget
