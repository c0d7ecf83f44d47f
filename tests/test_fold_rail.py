"""Folding on a rail topology with spines (clustersim/topology/rail.py, placement): a job
whose folded transfers all stay on their rails folds, within 1 % of the unfolded run with
and without ``fold_contention``; one whose data-parallel ring or pipeline sends cross rails
between servers is refused with the rail's reason."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import clustersim as cs
from clustersim.errors import ScenarioError
from clustersim.resolve import resolve
from clustersim.resolve.fold import route_obstacle
from clustersim.topology import Router, build_topology
from tests.test_fold_contention import _agrees, _fat_tree_job, _run, _weights_seen

REASON = "cross-rail routes on a rail topology with spines"


def _rail_job(nodes, tp, pp, *, nics=8, spines=2, over=1.0) -> dict:
    """:func:`_fat_tree_job`'s cluster on a rail topology with ``spines``."""
    job = _fat_tree_job(nodes, tp, pp, nics=nics)
    job["name"] = "fold-rail"
    job["cluster"]["topology"] = {"kind": "rail", "spines": spines, "oversubscription": over}
    return job


def test_rail_aligned_pipeline_and_dp_fold_within_1_percent():
    """TP 8 × PP 2 × DP 2 on 4 servers, one NIC per GPU: every send and DP ring hop is GPU j
    to GPU j of another server, on rail j; the 8 TP twins are images of each other rail by rail."""
    job = _rail_job(4, 8, 2)
    assert route_obstacle(resolve(cs.load_scenario(job))) is None
    unfolded, shadows, folded = _agrees(job)
    assert shadows["iteration_time_s"] == pytest.approx(unfolded["iteration_time_s"], rel=0.01)
    assert folded["folded"].startswith("yes") and not unfolded["folded"].startswith("yes")


def test_twins_sharing_a_nic_on_a_rail_fold_within_1_percent(monkeypatch):
    """4 NICs for 8 GPUs: TP twins j and j + 1 share NIC j // 2 and its rail, so the DP
    all-reduces' orbits carry multiplicity 2 on the NIC links; oversubscribed spines unused."""
    seen = _weights_seen(monkeypatch)
    _agrees(_rail_job(4, 8, 1, nics=4, over=2.0))
    assert 2 in seen and 0 not in seen  # every orbit symmetric, some shared


@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (4, 1)])
def test_a_ring_across_rails_is_refused_with_the_rails_reason(tp, pp):
    """With several DP members per server on different rails, the ring's hop between servers
    crosses rails: spine or NVLink forwarding by ECMP, unlike pair by pair."""
    job = _rail_job(2, tp, pp)
    assert route_obstacle(resolve(cs.load_scenario(job))).startswith(REASON)
    with pytest.raises(ScenarioError, match=REASON):
        _run(job, True, True)


def _pairs(plan):
    """Every pipeline send and data-parallel ring hop of ``plan`` (GPU index pairs)."""
    devices = np.arange(plan.num_devices).reshape(plan.pp, plan.replicas, plan.tp)
    for s in range(plan.pp - 1):
        yield from zip(devices[s].ravel(), devices[s + 1].ravel(), strict=True)
    yield from zip(devices.ravel(), np.roll(devices, -1, axis=1).ravel(), strict=True)


@pytest.mark.parametrize("nics", [2, 4, 8])
def test_every_layout_folding_accepts_keeps_off_the_spines(nics):
    """The proof folding relies on, checked by routing: on every TP × PP layout of 4 servers
    that the fold check accepts, no send or ring hop of any GPU routes through a spine (so no
    ECMP choice between unlike paths is taken); and each refusal names the rails' reason."""
    job = _rail_job(4, 8, 1, nics=nics)
    g = build_topology(job["cluster"])
    router = Router(g)
    verdicts = set()
    for tp, pp in itertools.product((1, 2, 4, 8), (1, 2, 4)):
        dp = 32 // (tp * pp)
        training = {**job["training"], "global_batch": 4 * dp}
        parallel = {"tp": tp, "pp": pp, "dp": dp}
        plan_job = resolve(cs.load_scenario({**job, "training": training, "parallel": parallel}))
        why = route_obstacle(plan_job)
        spined = [
            (a, b)
            for a, b in _pairs(plan_job.plan)
            if any(n.startswith("spine") for n in router.path(f"gpu{a}", f"gpu{b}"))
        ]
        if why is None:
            assert spined == [], (tp, pp)
        else:
            assert why.startswith(REASON), (tp, pp, why)
        verdicts.add(why is None)
    assert verdicts == {True, False}  # each NIC count has layouts of both kinds
