"""An unfolded contention-free run evaluated as replicas of its folded Program
(clustersim/engine/replicas.py) reports what the real unfolded run reports: the same spans
in the same order, device table, summary (``sim_events`` included) and every GPU's memory
timeline; compared with ``simulation.evaluator: des``, which runs every GPU on SimPy."""

from __future__ import annotations

import pandas as pd
import pytest

import clustersim as cs


def _scenario(schedule="1f1b", nodes=8, tp=2, dp=8, **extra) -> dict:
    sim = {"network": "analytical", "collective_model": "analytical", "granularity": "stage", "fold": False}
    par = {"tp": tp, "pp": 4, "dp": dp, "schedule": schedule}
    training = {"global_batch": dp * 8, "micro_batch": 1}
    cluster = {"preset": "dgx_a100", "nodes": nodes}
    for key, value in extra.items():
        section, field = key.split("__")
        {"simulation": sim, "parallel": par, "training": training, "cluster": cluster}[section][field] = value
    return {
        "name": "replicas",
        "cluster": cluster,
        "model": {"preset": "gpt-1.3b", "seq_len": 1024},
        "training": training,
        "parallel": par,
        "simulation": sim,
    }


#: (case, scenario, whether the memory rows come in the unfolded run's order too)
CASES = [
    ("1f1b", _scenario(), True),
    ("gpipe", _scenario("gpipe"), True),
    ("zb_h1", _scenario("zb_h1"), True),
    ("zb_v", _scenario("zb_v"), True),
    ("pipedream_2bw", _scenario("pipedream_2bw"), True),
    ("interleaved", _scenario("interleaved", parallel__virtual_stages=2), False),
    ("dualpipe", _scenario("dualpipe"), False),
    ("zero1", _scenario(parallel__zero=1), True),
    ("zero3", _scenario(parallel__zero=3), True),
    ("sequence_parallel", _scenario(parallel__sequence_parallel=True), True),
    ("tp8", _scenario(tp=8, dp=2), True),
    ("128 GPUs", _scenario(nodes=16, dp=16), True),
    ("fat tree 2:1", _scenario(cluster__topology={"kind": "fat_tree", "oversubscription": 2}), True),
    ("3 iterations", _scenario(simulation__iterations=3), True),
    ("layer granularity", _scenario(simulation__granularity="layer"), True),
    ("direct network, fold auto", _scenario(simulation__network="direct", simulation__fold="auto"), True),
]


def _summary(res) -> dict:
    return {k: v for k, v in res.summary.items() if k not in ("evaluator", "wall_time_s")}


@pytest.mark.parametrize("sc, same_order", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_replicated_result_is_the_unfolded_runs(sc, same_order):
    got = cs.simulate(sc, progress=False)
    want = cs.simulate({**sc, "simulation": {**sc["simulation"], "evaluator": "des"}}, progress=False)
    assert got.summary["evaluator"].startswith(f"dag ×{sc['parallel']['tp'] * sc['parallel']['dp']} replicas")
    pd.testing.assert_frame_equal(got.spans, want.spans)
    pd.testing.assert_frame_equal(got.devices, want.devices)
    assert _summary(got) == _summary(want)
    # every GPU's own timeline in the unfolded run's order; across GPUs at one time, the
    # order is the unfolded run's where twins run one after another
    by_gpu = lambda m: m.sort_values("device", kind="stable").reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(by_gpu(got.memory), by_gpu(want.memory))
    assert got.memory.equals(want.memory) is same_order
    assert len(want.waits) > 0  # waits too, row for row (rendezvous ones name the unfolded last member)
    pd.testing.assert_frame_equal(got.waits, want.waits)


def test_not_replicated_says_why():
    """Twins that differ (compute noise) run unfolded on the DAG pass, and the note says why."""
    sc = _scenario(simulation__compute_noise={"sigma": 0.05})
    res = cs.simulate(sc, progress=False)
    assert res.summary["evaluator"].startswith("dag (contention-free")
    assert "not replicated: twins differ: compute noise makes replicas differ" in res.summary["evaluator"]
