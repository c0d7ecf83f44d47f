"""The pre-run estimate tells the truth on every shipped scenario (issue 38 item 6): its
events (and ops) within 2× of what the run really does, each scenario run as shipped
(``benchmarks/estimate_truth.py`` prints the same comparison with CPU time and RSS); and
a run whose memory would pass what the machine has is refused before it starts, with the
settings that fit."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import clustersim as cs
from clustersim.resolve import estimate as estimate_module
from clustersim.resolve import resolve
from clustersim.resolve.estimate import check_budget, estimate

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("estimate_truth", ROOT / "benchmarks" / "estimate_truth.py")
estimate_truth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(estimate_truth)

#: shipped scenarios checked in the default run, one per mode and fabric that runs in a few
#: seconds on the project's 2-core machine; every other shipped scenario (each estimate,
#: compile and run takes 5–300 s there) is checked in the slow step CI runs too
QUICK = {
    "quickstart",  # pipeline, packet fabric
    "synthetic-4stage-1f1b",  # synthetic model
    "ps-edge-16workers-20mbit",  # parameter server
    "pipedream-vgg16-16xV100-10GbE-15-1",  # stage replicas
    "two-jobs-oversubscribed-fat-tree",  # two jobs on one fabric
}


@pytest.mark.parametrize(
    "path",
    [p if p.stem in QUICK else pytest.param(p, marks=pytest.mark.slow) for p in estimate_truth.shipped()],
    ids=lambda p: p.stem,
)
def test_the_estimate_is_within_2x_of_every_shipped_run(path):
    r = estimate_truth.truth(path)
    est = r["est"]
    assert 0.5 <= est["events"] / r["events"] <= 2, (est["events"], r["events"])
    assert 0.5 <= est["ops"] / r["ops"] <= 2, (est["ops"], r["ops"])


def test_a_run_past_the_machines_memory_is_refused_with_what_fits(monkeypatch):
    """GPT-3 175B on 1,024 A100 unfolded at the balanced fidelity, on a machine with 1 GiB
    free: refused before compiling, naming folding (whose estimate fits) as the fix."""
    sc = cs.load_scenario(ROOT / "scenarios" / "gpt3-175b-1024xa100-balanced.yaml")
    job = resolve(sc.with_overrides({"simulation.fold": False}))
    unfolded, folded = estimate(job), estimate(resolve(sc.with_overrides({"simulation.fold": True})))
    assert folded.rss_bytes < 2**30 < unfolded.rss_bytes
    monkeypatch.setattr(estimate_module, "available_memory", lambda: 2**30)
    with pytest.raises(cs.ScenarioError) as err:
        check_budget(job, "pipeline")
    msg = str(err.value)
    assert err.value.field == "memory"
    assert "more than the 1 GiB this machine has available; to fit it: " in msg
    assert "simulation.fold: true (" in msg


def test_a_run_that_fits_is_not_refused(monkeypatch):
    sc = cs.load_scenario(ROOT / "scenarios" / "synthetic-4stage-1f1b.yaml")
    est = estimate(resolve(sc))
    monkeypatch.setattr(estimate_module, "available_memory", lambda: est.rss_bytes + 1)
    assert cs.simulate(sc, progress=False).summary["sim_events"] > 0
    monkeypatch.setattr(estimate_module, "available_memory", lambda: est.rss_bytes - 1)
    with pytest.raises(cs.ScenarioError, match="memory: '~"):
        cs.simulate(sc, progress=False)


#: LLaMA-3-70B cut to 2 layers on one DGX H100 with CP 8 alone: ring attention's K/V sends
#: and recvs are most of its ops
RING_ONLY = {
    "model.layers": 2,
    "training.global_batch": 2,
    "parallel.pp": 1,
    "parallel.tp": 1,
    "parallel.sequence_parallel": False,
    "cluster.nodes": 1,
}


@pytest.mark.parametrize("granularity", ["layer", "stage"])
def test_collectives_timed_inside_one_nvlink_domain_cost_three_events_a_call(granularity):
    """GPT-7.5B on 64 H100 at ``balanced`` (TP 8 inside each DGX, DP 8 across a fat tree),
    global batch 64: the TP collectives stay inside one node's private NVLink links, so the
    run times each by its α-β form in 3 events, however many members (engine/interpreter.py);
    the estimate once charged 3 per member (2.77× at layer granularity, 1.87× at stage
    granularity with the shipped batch)."""
    r = estimate_truth.truth(
        ROOT / "scenarios" / "gpt-7.5b-64xh100-balanced.yaml",
        {"simulation.granularity": granularity, "training.global_batch": 64},
    )
    assert 0.5 <= r["est"]["events"] / r["events"] <= 2, (r["est"]["events"], r["events"])


#: Llama-3.1-405B at 128K tokens on 16,384 H100 as Meta trained it (TP 8 × CP 16 × PP 16 ×
#: DP 8, 16 M tokens a step) at layer granularity: the run issue 38 saw killed by the
#: operating system past 24 GB
LLAMA_405B_CP16 = {
    "name": "llama31-405b-128k-cp16-16384xh100",
    "cluster": {"preset": "dgx_h100", "nodes": 2048},
    "model": {"preset": "llama3-405b", "seq_len": 131072, "attention": "flash"},
    "training": {"global_batch": 128, "micro_batch": 1, "recompute": "full"},
    "parallel": {
        "tp": 8,
        "cp": 16,
        "cp_comm_type": "p2p",
        "pp": 16,
        "dp": 8,
        "schedule": "1f1b",
        "sequence_parallel": True,
        "zero": 1,
        "partition": "balanced",
    },
    "simulation": {"granularity": "layer", "network": "analytical", "collective_model": "analytical"},
}


def test_llama_405b_at_128k_with_cp16_is_refused_before_it_starts(monkeypatch):
    """Unfolded, refused by its op budget; with the budgets raised, by the 24 GiB the
    machine had — before compiling, however many of the estimate's ~1.7 kB per op it needs
    (the estimate holds within 2× of ops, events and RSS on the same shape at 256 GPUs,
    benchmarks/estimate_truth.py) — naming the knob that fits it: folding, which CP runs
    take where their rings are symmetric or hidden (tests/test_fold_cp.py). As it stands
    (``fold: auto``) it folds and fits."""
    sc = cs.load_scenario(LLAMA_405B_CP16)
    check_budget(resolve(sc), "pipeline")  # auto folds it: within every budget
    unfolded = sc.with_overrides({"simulation.fold": False})
    with pytest.raises(cs.ScenarioError, match="simulation.max_ops"):
        check_budget(resolve(unfolded), "pipeline")
    monkeypatch.setattr(estimate_module, "available_memory", lambda: 24 * 2**30)
    raised = unfolded.with_overrides({"simulation.max_ops": 10**10, "simulation.max_events": 10**12})
    with pytest.raises(cs.ScenarioError) as err:
        check_budget(resolve(raised), "pipeline")
    assert err.value.field == "memory"
    assert "more than the 24 GiB this machine has available; to fit it: simulation.fold: true" in str(
        err.value
    )


#: GPT-7.5B on 64 H100 with TP overlap (sequence parallel, layer granularity), folded
TP_OVERLAP = {
    "parallel.tp_comm_overlap": True,
    "parallel.sequence_parallel": True,
    "simulation.fidelity": "fast",
    "simulation.granularity": "layer",
    "simulation.fold": True,
    "training.global_batch": 64,
}


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("llama3-70b-128k-cp8", RING_ONLY),
        ("llama3-70b-128k-cp8", {**RING_ONLY, "parallel.pp": 2, "cluster.nodes": 2}),
        ("gpt-7.5b-64xh100-balanced", TP_OVERLAP),
    ],
    ids=["cp8-ring", "cp8-ring-pp2", "tp-overlap-folded"],
)
def test_a_contention_free_run_is_counted_not_modelled(name, overrides):
    """Where no op's time depends on what else is in flight, the DAG pass's events are a count
    (an op that holds its lane 1, a collective 3, a recv none) and so are the estimate's: ops
    and events within 10 %. TP overlap's userbuffers chunks are sends and recvs to the next
    TP rank (compilers/pipeline/tp_overlap.py), each GEMM chunk followed by its SM margin's op
    where it has one — the estimate once priced them as collectives (1.86× events, 0.70× ops
    here), and counted each ring-attention send as a fabric collective's step (4 events) and
    each recv as 1 (2.25× here, 2.02× on the shipped llama3-70b-128k-cp8)."""
    r = estimate_truth.truth(ROOT / "scenarios" / f"{name}.yaml", overrides)
    assert r["est"]["events"] == pytest.approx(r["events"], rel=0.1)
    assert r["est"]["ops"] == pytest.approx(r["ops"], rel=0.1)
