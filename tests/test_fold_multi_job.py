"""Folding the jobs of a multi-job run (issue 38 item 3): each job folded by its own twins on
the GPUs it was placed on, the other jobs' traffic on the real shared links
(clustersim/multijob/shared_links.py). A folded run against the unfolded run of the same
scenario at ``fast`` and ``balanced``, the refusals by name, and the estimate against a
folded multi-job run's events."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import clustersim as cs
import clustersim.multijob.run as multijob_run
from clustersim.errors import ScenarioError
from clustersim.resolve import fold as fold_module
from tests.test_estimate_truth import estimate_truth

#: symmetric twins run at the representative's rate at every moment: equal to float precision
EXACT = 1e-12
SHIPPED = Path(__file__).resolve().parent.parent / "scenarios" / "two-jobs-oversubscribed-fat-tree.yaml"


def _job(name: str, gpus: list[int], tp: int, pp: int, batch: int = 4) -> dict:
    dp = len(gpus) // (tp * pp)
    return {
        "name": name,
        "model": {"preset": "gpt-1.3b", "seq_len": 2048},
        "training": {"global_batch": batch * dp, "micro_batch": 2, "precision": "bf16"},
        "parallel": {"tp": tp, "pp": pp, "dp": dp},
        "placement": {"gpus": gpus},
    }


def _two_jobs(a_nodes, b_nodes, tp, pp=1, *, nics=1, spines=1, over=2, fidelity="balanced") -> dict:
    """Two GPT-1.3B jobs of TP × PP × DP on whole 8-GPU servers of a 4-server fat tree, two
    servers a leaf (``a_nodes``, ``b_nodes``: each job's servers)."""

    def gpus(nodes):
        return [n * 8 + g for n in nodes for g in range(8)]

    return {
        "name": "two-folded-jobs",
        "cluster": {
            "nodes": 4,
            "gpus_per_node": 8,
            "gpu": "H100-SXM5-80GB",
            "intra_node": {"kind": "nvswitch", "bandwidth": "450 GB/s", "latency": "2 us"},
            "nic": {"per_node": nics, "bandwidth": "400 Gbps", "latency": "2 us"},
            "topology": {"kind": "fat_tree", "nodes_per_leaf": 2, "spines": spines, "oversubscription": over},
        },
        "simulation": {"fidelity": fidelity},
        "jobs": [_job("a", gpus(a_nodes), tp, pp), _job("b", gpus(b_nodes), tp, pp)],
    }


def _small_neighbour(sc: dict, start: float = 0.16) -> dict:
    """``sc`` with job b shrunk to one DP-2 pair (gpu8 ↔ gpu24: one flow over one uplink of
    each leaf), job a started late enough that its gradient all-reduce meets b's."""
    sc = copy.deepcopy(sc)
    sc["jobs"][1] = _job("b", [8, 24], 1, 1)
    sc["jobs"][0]["start"] = start
    return sc


def _runs(scenario) -> tuple:
    sc = cs.load_scenario(scenario) if isinstance(scenario, (dict, Path)) else scenario
    return tuple(
        cs.simulate(sc.with_overrides({"simulation.fold": f}), progress=False) for f in (True, False)
    )


CASES = {
    # TP 8 × DP 2 each, a on servers 0 and 2, b on 1 and 3: each server's 8 TP twins share
    # its NIC, and both jobs' all-reduces the 2:1 uplinks of both leaves
    "tp 8, interleaved": _two_jobs([0, 2], [1, 3], 8),
    # a NIC per GPU: each TP twin on its own NIC, all of them on the one spine's uplinks
    "tp 8, a nic per gpu": _two_jobs([0, 2], [1, 3], 8, nics=8),
    # TP 4 × PP 2 × DP 2: replica twins' pipeline sends and TP twins' all-reduces
    "tp 4 × pp 2": _two_jobs([0, 2], [1, 3], 4, 2),
    # b one flow on one uplink of each leaf, which every flow of a's orbits crosses too (one spine)
    "an unlike neighbour on a shared uplink": _small_neighbour(_two_jobs([0, 2], [1, 3], 8)),
    # each job under a leaf of its own: no shared link at all
    "a leaf each": _two_jobs([0, 1], [2, 3], 8, 2),
}


@pytest.mark.parametrize("fidelity", ["fast", "balanced"])
@pytest.mark.parametrize("case", list(CASES))
def test_folded_jobs_equal_unfolded(case, fidelity):
    """Each job's iteration time folded is its unfolded one to float precision, with fewer events."""
    folded, unfolded = _runs({**CASES[case], "simulation": {"fidelity": fidelity}})
    for name in ("a", "b"):
        assert folded.jobs[name].summary["folded"].startswith("yes"), folded.jobs[name].summary["folded"]
        f, u = (r.summary[f"{name}.iteration_time_s"] for r in (folded, unfolded))
        assert f == pytest.approx(u, rel=EXACT, abs=0)
    assert folded.summary["sim_events"] < unfolded.summary["sim_events"]
    # every GPU still has its row, a folded twin its representative's
    assert folded.devices["device"].tolist() == unfolded.devices["device"].tolist()
    assert folded.devices["peak_memory_bytes"].tolist() == unfolded.devices["peak_memory_bytes"].tolist()


def test_on_the_packet_network_folded_jobs_are_within_one_percent():
    """``exact``'s packet network (at stage granularity): chunks interleave in FIFO order, so
    a folded job is within the issue's 1 %, as a job alone is (not to float precision)."""
    sc = {**CASES["tp 4 × pp 2"], "simulation": {"fidelity": "exact", "granularity": "stage"}}
    folded, unfolded = _runs(sc)
    for name in ("a", "b"):
        key = f"{name}.iteration_time_s"
        assert folded.summary[key] == pytest.approx(unfolded.summary[key], rel=0.01)


@pytest.mark.parametrize(
    "overrides", [{}, {"simulation.fidelity": "balanced"}], ids=["as shipped", "balanced"]
)
def test_the_shipped_two_job_scenario_folds_exactly(overrides):
    """DP 16 per job, TP 1: no twin traffic rides with a representative (every all-reduce
    message is simulated), so each job folds whatever the other sends."""
    folded, unfolded = _runs(cs.load_scenario(SHIPPED).with_overrides(overrides))
    for key in ("job_a.iteration_time_s", "job_b.iteration_time_s", "job_a.mfu", "job_b.exposed_dp_fraction"):
        assert folded.summary[key] == pytest.approx(unfolded.summary[key], rel=EXACT, abs=0)
    assert folded.summary["sim_events"] < unfolded.summary["sim_events"]


def test_twins_meeting_another_job_unlike_their_representative_are_refused_by_name():
    """Two spines: a's 8 TP twins' all-reduce flows spread over both uplinks of leaf 0, b's
    one flow takes one of them — a twin there would be slowed where its representative is not."""
    sc = _small_neighbour(_two_jobs([0, 2], [1, 3], 8, spines=2))
    with pytest.raises(ScenarioError) as err:
        cs.simulate(cs.load_scenario(sc).with_overrides({"simulation.fold": True}), progress=False)
    text = str(err.value)
    assert "simulation.fold" in text and "job 'a'" in text and "job 'b'" in text
    assert "leaf0 → spine" in text and "4 of their 8 flows" in text


def test_the_refusal_is_what_keeps_the_fold_exact(monkeypatch):
    """The same case with the check taken out, each twin's traffic its own flow
    (``fold_contention`` off): the representative, on the uplink b does not take, finishes
    its all-reduce before the twins b slows — the folded iteration comes out short."""
    sc = _small_neighbour(_two_jobs([0, 2], [1, 3], 8, nics=8, spines=2))
    sc["simulation"]["fold_contention"] = False
    monkeypatch.setattr(multijob_run, "shared_link_obstacles", lambda *args: {})
    folded, unfolded = (r.summary["a.iteration_time_s"] for r in _runs(sc))
    assert folded < unfolded * (1 - 0.01)


def test_auto_runs_a_refused_job_unfolded_and_says_why(monkeypatch):
    """Under ``fold: auto`` (its GPU threshold lowered to these jobs) the refused job runs
    unfolded with the reason in its summary; the other folds; both equal the unfolded run."""
    monkeypatch.setattr(fold_module, "AUTO_FOLD_MIN_GPUS", 2)
    sc = cs.load_scenario(_small_neighbour(_two_jobs([0, 2], [1, 3], 8, spines=2)))
    auto = cs.simulate(sc.with_overrides({"simulation.fold": "auto"}), progress=False)
    unfolded = cs.simulate(sc.with_overrides({"simulation.fold": False}), progress=False)
    assert auto.jobs["a"].summary["folded"].startswith("no (job 'a''s folded twins")
    assert auto.jobs["b"].summary["folded"].startswith("yes")
    for name in ("a", "b"):
        key = f"{name}.iteration_time_s"
        assert auto.summary[key] == pytest.approx(unfolded.summary[key], rel=EXACT, abs=0)


def test_a_job_folds_by_the_routes_of_its_placed_gpus():
    """Job a's DP ring replica by replica: placed on servers 0, 1 and 2 (0 and 1 under leaf
    0, 2 under leaf 1), its TP rank 0 → 1 … pipeline pairs differ in level — refused, naming
    the level, as a job alone on those GPUs is."""
    sc = _two_jobs([0, 2], [1, 3], 8)
    sc["jobs"] = [_job("a", list(range(0, 24)), 8, 1), _job("b", list(range(24, 32)), 8, 1)]
    sc["jobs"][0]["parallel"] = {"tp": 4, "pp": 2, "dp": 3}
    sc["jobs"][0]["training"]["global_batch"] = 12
    with pytest.raises(ScenarioError, match="within one (server|leaf switch)"):
        cs.simulate(cs.load_scenario(sc).with_overrides({"simulation.fold": True}), progress=False)


def test_a_tp_group_split_over_servers_by_its_placement_is_refused():
    """Placed on GPUs 4–11 (half of server 0, half of server 1), job a's TP 8 group spans two
    servers: its TP collectives, dropped when folded, would load NICs others share."""
    sc = _two_jobs([0, 2], [1, 3], 8)
    sc["jobs"] = [_job("a", [*range(4, 12), *range(20, 28)], 8, 1), _job("b", list(range(12, 20)), 8, 1)]
    with pytest.raises(
        ScenarioError, match=r"the TP group on GPUs \[4, 5, 6, 7, 8, 9, 10, 11\] spans 2 servers"
    ):
        cs.simulate(cs.load_scenario(sc).with_overrides({"simulation.fold": True}), progress=False)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tp=st.sampled_from([2, 4, 8]),
    pp=st.sampled_from([1, 2]),
    nics=st.sampled_from([1, 8]),
    spines=st.sampled_from([1, 2]),
    over=st.sampled_from([1, 2]),
    interleaved=st.booleans(),
    small=st.booleans(),
    fidelity=st.sampled_from(["fast", "balanced"]),
)
def test_random_foldable_two_job_shapes_equal_unfolded(
    tp, pp, nics, spines, over, interleaved, small, fidelity
):
    """Every two-job shape that folds (refused ones are skipped) equals its unfolded run."""
    nodes = ([0, 2], [1, 3]) if interleaved else ([0, 1], [2, 3])
    sc = _two_jobs(*nodes, tp, pp, nics=nics, spines=spines, over=over, fidelity=fidelity)
    if small and interleaved:  # (b one pair: gpu8 on server 1, gpu24 on server 3)
        sc = _small_neighbour(sc)
    try:
        folded, unfolded = _runs(sc)
    except ScenarioError as exc:
        assume("cannot fold" not in str(exc))
        raise
    for name in ("a", "b"):
        key = f"{name}.iteration_time_s"
        assert folded.summary[key] == pytest.approx(unfolded.summary[key], rel=EXACT, abs=0)


def test_the_estimate_is_within_2x_of_a_folded_multi_job_run(tmp_path):
    """The pre-run estimate (the jobs' estimates summed, each folded on its placed GPUs)
    against the folded run's events and ops."""
    paths = [SHIPPED]
    for case in ("tp 8, interleaved", "tp 4 × pp 2"):
        paths.append(tmp_path / f"{len(paths)}.yaml")
        paths[-1].write_text(yaml.safe_dump(CASES[case]))
    for path in paths:
        r = estimate_truth.truth(path, {"simulation.fold": True})
        assert 0.5 <= r["est"]["events"] / r["events"] <= 2, (r["est"]["events"], r["events"])
        assert 0.5 <= r["est"]["ops"] / r["ops"] <= 2, (r["est"]["ops"], r["ops"])


def _two_cp_jobs(seq_len: int) -> dict:
    """Two TP 8 × CP 4 jobs (a Llama-3-8B-like model, 2 layers) on 4 servers each of an
    8-server fat tree, a NIC per GPU, two servers a leaf: each job's CP rings cross its own
    leaf border twice (clustersim/resolve/hidden_ring.py)."""
    sc = _two_jobs([0, 2], [1, 3], 8, nics=8)
    sc["cluster"]["nodes"] = 8
    sc["jobs"] = []
    for name, first in (("a", 0), ("b", 32)):
        job = _job(name, list(range(first, first + 32)), 8, 1)
        job["model"] = {"preset": "llama3-8b", "layers": 2, "seq_len": seq_len, "attention": "flash"}
        job["parallel"].update(cp=4, dp=1, cp_comm_type="p2p")
        job["training"].update(global_batch=2, micro_batch=1)
        sc["jobs"].append(job)
    return sc


def test_mixed_cp_rings_of_two_jobs_fold_checked_as_they_run(monkeypatch):
    """At 32K tokens every hop hides: both jobs fold, each job's time its unfolded one; at
    8K one shows, and ``auto`` (its threshold lowered) runs both again unfolded, saying why."""
    folded, unfolded = _runs(_two_cp_jobs(32768))
    for name in ("a", "b"):
        assert folded.jobs[name].summary["folded"].endswith("checked to hide as it ran")
        key = f"{name}.iteration_time_s"
        assert folded.summary[key] == pytest.approx(unfolded.summary[key], rel=EXACT, abs=0)
    monkeypatch.setattr(fold_module, "AUTO_FOLD_MIN_GPUS", 2)
    sc = cs.load_scenario(_two_cp_jobs(8192))
    auto = cs.simulate(sc.with_overrides({"simulation.fold": "auto"}), progress=False)
    unfolded = cs.simulate(sc.with_overrides({"simulation.fold": False}), progress=False)
    for name in ("a", "b"):
        assert auto.jobs[name].summary["folded"].startswith("no ('cp send F0 ring_attention 0'")
        key = f"{name}.iteration_time_s"
        assert auto.summary[key] == unfolded.summary[key]
