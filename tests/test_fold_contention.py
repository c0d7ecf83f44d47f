"""Folding under contention (``simulation.fold_contention``, clustersim/network/orbits.py):
a folded run whose twins' flows travel as weighted orbits against the unfolded run of the
same scenario, on fat trees where the twins share NICs and oversubscribed uplinks."""

from __future__ import annotations

import copy
import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import clustersim as cs
import clustersim.network.orbits as orbits
from clustersim.errors import ScenarioError
from clustersim.network.maxmin import Links
from clustersim.resolve import resolve
from clustersim.resolve.estimate import advice, estimate
from clustersim.scenario import read_yaml
from tests.test_fold import _shared_nic_job

TOL = 0.01  # the bound: folded under contention within 1 % of unfolded


def fold_examples(default: int):
    """The Hypothesis settings of a random fold test: ``FOLD_EXAMPLES`` examples (``default``
    where unset), no deadline (each example simulates twice)."""
    return settings(
        max_examples=int(os.environ.get("FOLD_EXAMPLES", default)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def _fat_tree_job(nodes, tp, pp, *, nics=1, per_leaf=2, spines=1, over=2, model="gpt-1.3b") -> dict:
    dp = nodes * 8 // (tp * pp)
    return {
        "name": "fold-contention",
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": 8,
            "gpu": "H100-SXM5-80GB",
            "intra_node": {"kind": "nvswitch", "bandwidth": "450 GB/s", "latency": "2 us"},
            "nic": {"per_node": nics, "bandwidth": "400 Gbps", "latency": "2 us"},
            "topology": {
                "kind": "fat_tree",
                "nodes_per_leaf": per_leaf,
                "spines": spines,
                "oversubscription": over,
            },
        },
        "model": {"preset": model, "seq_len": 2048},
        "training": {"global_batch": 4 * dp, "micro_batch": 2, "precision": "bf16"},
        "parallel": {"tp": tp, "pp": pp, "dp": dp},
        "simulation": {"fidelity": "balanced"},
    }


def _run(scenario, fold: bool, contention: bool) -> dict:
    """``scenario`` (a dict or a Scenario) run with ``simulation.fold`` and ``fold_contention``."""
    sc = cs.load_scenario(scenario) if isinstance(scenario, dict) else scenario
    sc = sc.with_overrides({"simulation.fold": fold, "simulation.fold_contention": contention})
    return cs.simulate(sc, progress=False).summary


def _weights_seen(monkeypatch) -> list[int]:
    """The largest multiplicity of every orbit the run works out (recorded as it runs)."""
    seen, original = [], orbits.orbit_of

    def recording(*args):
        orbit = original(*args)
        seen.append(0 if orbit is None else max(orbit.weights or (1,)))
        return orbit

    monkeypatch.setattr(orbits, "orbit_of", recording)
    return seen


def _agrees(scenario) -> tuple[dict, dict, dict]:
    unfolded = _run(scenario, False, False)
    shadows = _run(scenario, True, False)
    folded = _run(scenario, True, True)
    want = unfolded["iteration_time_s"]
    assert folded["iteration_time_s"] == pytest.approx(want, rel=TOL)
    return unfolded, shadows, folded


def test_twins_sharing_one_nic_per_node(monkeypatch):
    """TP 8 × DP 4 with one NIC per node: the 8 TP twins' DP all-reduces share each NIC (an
    incast of 8 flows, and 2:1 uplinks): the orbits carry multiplicity 8, the iteration time
    is the unfolded one, with far fewer events than keeping the shadows as flows."""
    weights = _weights_seen(monkeypatch)
    unfolded, shadows, folded = _agrees(_fat_tree_job(4, 8, 1))
    assert max(weights) == 8  # the twins do share links: the weighted path is what ran
    assert folded["sim_events"] < shadows["sim_events"] / 3
    assert "one flow per orbit" in folded["folded"] and "shadow traffic" in shadows["folded"]
    # without the twins' load the all-reduce would run 8× faster through the NIC
    assert folded["iteration_time_s"] > 1.05 * _alone(_fat_tree_job(4, 8, 1))


def _alone(scenario: dict) -> float:
    """The iteration time with every NIC per GPU (no twin shares a NIC or an uplink)."""
    sc = copy.deepcopy(scenario)
    sc["cluster"]["nic"]["per_node"] = 8
    sc["cluster"]["topology"]["oversubscription"] = 1
    return _run(sc, True, True)["iteration_time_s"]


def test_pipeline_sends_and_dp_on_an_oversubscribed_tree(monkeypatch):
    """TP 2 × PP 2 × DP 8 on a 4:1 tree: pipeline sends and DP all-reduces of 16 twins per
    stage cross shared NICs and uplinks."""
    weights = _weights_seen(monkeypatch)
    _agrees(_fat_tree_job(4, 2, 2, over=4))
    assert max(weights) > 1


def test_pipeline_incast_through_one_nic(monkeypatch):
    """PP 2 across two 4-GPU nodes with one NIC each, DP 4: the four replicas' activations
    squeeze through one NIC pair (send orbits of multiplicity 4); folded under contention,
    the unfolded time — and 2.5× that with a NIC per replica."""
    weights = _weights_seen(monkeypatch)
    sc = _shared_nic_job(False)  # test_fold's incast case, on the flow network
    sc["simulation"] = {"network": "flow"}
    _, _, folded = _agrees(sc)
    assert 4 in weights
    alone = copy.deepcopy(sc)
    alone["cluster"]["nic"]["per_node"] = 4  # a NIC per replica: no incast
    assert folded["iteration_time_s"] > 2.5 * _run(alone, True, True)["iteration_time_s"]


def test_tp_overlap_ring_sends_at_layer_granularity():
    """TP 8 with userbuffers overlap (layer granularity): the folded ring's sends, each
    standing for the previous TP rank's, and their hops as orbits inside the node, beside
    DP all-reduces through one NIC per node."""
    sc = _fat_tree_job(2, 8, 1)
    sc["parallel"].update(tp_comm_overlap=True, sequence_parallel=True)
    sc["simulation"]["granularity"] = "layer"
    sc["training"]["global_batch"] = 4
    _, shadows, folded = _agrees(sc)
    # shadows ride as loads (no arrival events: Fabric.load), so the orbits' gain is flows,
    # not events — they must add none
    assert folded["sim_events"] <= shadows["sim_events"]


def test_shipped_balanced_gpt_on_an_oversubscribed_tree():
    """The shipped GPT-7.5B balanced scenario (64 H100, TP 8 × DP 8) on a 2:1 tree."""
    sc = cs.load_scenario("scenarios/gpt-7.5b-64xh100-balanced.yaml")
    _agrees(sc.with_overrides({"cluster.topology.oversubscription": 2, "training.global_batch": 64}))


@fold_examples(8)
@given(
    nodes=st.sampled_from([2, 4, 8]),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2]),
    nics=st.sampled_from([1, 2, 8]),
    per_leaf=st.sampled_from([1, 2, 4]),
    spines=st.sampled_from([1, 2]),
    over=st.sampled_from([1, 2, 4]),
)
def test_random_small_fat_trees(nodes, tp, pp, nics, per_leaf, spines, over):
    """Random small fat trees and TP × PP × DP shapes that fold exactly: folded under
    contention within 1 % of unfolded."""
    assume(nodes * 8 % (tp * pp) == 0 and nodes * 8 // (tp * pp) > 1)
    scenario = _fat_tree_job(nodes, tp, pp, nics=nics, per_leaf=per_leaf, spines=spines, over=over)
    try:
        job = resolve(cs.load_scenario(scenario))
    except ScenarioError:
        assume(False)
    assume(job.fold_obstacle is None)
    _agrees(scenario)


def test_a_weighted_flow_shares_as_that_many_flows():
    """Max-min with a flow of multiplicity k on a link equals k separate flows there: link 0
    (100) carries a 3-weighted flow and a plain one, link 1 (10) the plain one alone."""
    weighted, plain = Links(), Links()
    for net in (weighted, plain):
        net.add_link(), net.add_link()
    weighted.add_flow((0,), (3,))
    weighted.add_flow((0, 1))
    for _ in range(3):
        plain.add_flow((0,))
    plain.add_flow((0, 1))
    w_slots, w_rates = weighted.fill([0, 1], [100.0, 10.0])
    p_slots, p_rates = plain.fill([0, 1], [100.0, 10.0])
    # the plain flow is held to 10 by link 1; the 3 others share the 90 left
    assert dict(zip(w_slots, w_rates)) == {1: 10.0, 0: 30.0}
    assert dict(zip(p_slots, p_rates)) == {3: 10.0, 0: 30.0, 1: 30.0, 2: 30.0}


@pytest.mark.parametrize(
    ("value", "network", "says"),
    [("maybe", "flow", "boolean"), (True, "packet", "flow network"), (True, "analytical", "flow network")],
)
def test_bad_values_are_refused(value, network, says):
    sc = _fat_tree_job(2, 8, 1)
    sc["simulation"].update(network=network, fold_contention=value)
    with pytest.raises(ScenarioError, match="simulation.fold_contention") as err:
        cs.load_scenario(sc)
    assert says in str(err.value)


@pytest.mark.parametrize("contention", [False, True])
def test_the_estimate_counts_orbits_as_one_flow(contention):
    """The pre-run estimate (issue 38 item 6) within 2× of the run's events, with the twins'
    traffic as shadows and as orbits (the latter has ~6× fewer events here)."""
    sc = cs.load_scenario(_fat_tree_job(4, 8, 1)).with_overrides(
        {"simulation.fold": True, "simulation.fold_contention": contention}
    )
    est = estimate(resolve(sc))
    events = cs.simulate(sc, progress=False).summary["sim_events"]
    assert 0.5 <= est.events / events <= 2, (est.events, events)


def test_the_advice_names_it_for_a_folded_balanced_run_only():
    """A folded run on the flow network with the switch off is told the switch and what it
    saves; with it on (the balanced preset's default) it is not, nor is a packet run (the
    switch is refused there)."""
    raw = read_yaml("scenarios/gpt3-175b-1024xa100-balanced.yaml")
    raw["simulation"]["fold_contention"] = False
    tips = advice(resolve(cs.load_scenario(raw)))
    assert any(t.startswith("simulation.fold_contention: true") for t in tips)
    on = advice(resolve(cs.load_scenario("scenarios/gpt3-175b-1024xa100-balanced.yaml")))
    assert not any("fold_contention" in t for t in on)
    packet = advice(resolve(cs.load_scenario("scenarios/quickstart.yaml")))
    assert not any("fold_contention" in t for t in packet)
