"""An unfolded contention-free run evaluated as replicas of its folded Program
(clustersim/compilers/pipeline/replicas.py) reports what the real unfolded run reports: the same spans
in the same order, device table, summary (``sim_events`` included) and every GPU's memory
timeline; compared with ``simulation.evaluator: des``, which runs every GPU on SimPy."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

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
    # TP overlap: userbuffers chunks as sends around the TP ring (folded: each representative's
    # send stands for its TP predecessor's, passes.SegmentEmitter.folded_ring)
    (
        "tp overlap, layer granularity",
        _scenario(
            nodes=4,
            dp=4,
            parallel__sequence_parallel=True,
            parallel__tp_comm_overlap=True,
            simulation__granularity="layer",
        ),
        True,
    ),
    (
        "tp overlap tp 8, 1 stage",
        _scenario(
            nodes=2,
            tp=8,
            dp=2,
            parallel__pp=1,
            parallel__sequence_parallel=True,
            parallel__tp_comm_overlap=True,
            simulation__granularity="layer",
        ),
        True,
    ),
]
#: expert parallelism (Mixtral's MoE layers: all-to-alls over EP groups, expert gradients over EDP)
for _tp in (1, 2):
    CASES.append(
        (
            f"mixtral ep 4 tp {_tp}",
            {
                **_scenario(nodes=4, tp=_tp, dp=16 // _tp),
                "model": {"hf_config": "mixtral-8x7b", "seq_len": 1024},
                "cluster": {"preset": "dgx_h100", "nodes": 4},
                "training": {"global_batch": 64, "micro_batch": 1},
                "parallel": {"tp": _tp, "pp": 2, "ep": 4, "schedule": "1f1b", "sequence_parallel": _tp > 1},
            },
            True,
        )
    )


def _summary(res) -> dict:
    return {k: v for k, v in res.summary.items() if k not in ("evaluator", "wall_time_s")}


def _same_as_unfolded(sc: dict, same_order: bool = True) -> None:
    got = cs.simulate(sc, progress=False)
    want = cs.simulate({**sc, "simulation": {**sc["simulation"], "evaluator": "des"}}, progress=False)
    twins = want.summary["tp"] * want.summary["dp"]
    assert got.summary["evaluator"].startswith(f"dag ×{twins} replicas"), got.summary["evaluator"]
    assert len(got.spans) == len(want.spans) > 0
    pd.testing.assert_frame_equal(got.spans, want.spans, check_exact=True)
    pd.testing.assert_frame_equal(got.devices, want.devices, check_exact=True)
    assert _summary(got) == _summary(want)
    # every GPU's own timeline in the unfolded run's order; across GPUs at one time, the
    # order is the unfolded run's where twins run one after another
    by_gpu = lambda m: m.sort_values("device", kind="stable").reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(by_gpu(got.memory), by_gpu(want.memory))
    if same_order:
        pd.testing.assert_frame_equal(got.memory, want.memory)
    assert len(want.waits) > 0  # waits too, row for row (rendezvous ones name the unfolded last member)
    pd.testing.assert_frame_equal(got.waits, want.waits)


@pytest.mark.parametrize("sc, same_order", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_replicated_result_is_the_unfolded_runs(sc, same_order):
    _same_as_unfolded(sc, same_order)


def test_memory_rows_differ_only_in_order_where_twins_interleave():
    """An interleaved schedule: the unfolded engine appends some samples of one time twin by
    twin where the replicated run repeats them sample by sample (replicas.py's docstring);
    the rows are the same."""
    sc = _scenario("interleaved", parallel__virtual_stages=2)
    got = cs.simulate(sc, progress=False).memory
    want = cs.simulate({**sc, "simulation": {**sc["simulation"], "evaluator": "des"}}, progress=False).memory
    assert not got.equals(want)
    canon = lambda m: m.sort_values(list(m.columns), kind="stable").reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(canon(got), canon(want))


@settings(max_examples=6, deadline=None)
@given(
    schedule=st.sampled_from(["1f1b", "gpipe", "zb_h1", "pipedream_2bw"]),
    tp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([2, 4]),
    pp=st.sampled_from([2, 4]),
    per_replica=st.integers(4, 9),
    zero=st.sampled_from([0, 1]),
)
def test_random_plans(schedule, tp, dp, pp, per_replica, zero):
    assume(tp * dp * pp >= 8)  # whole DGX nodes
    sc = _scenario(schedule, nodes=tp * dp * pp // 8, tp=tp, dp=dp, parallel__zero=zero)
    sc["parallel"]["pp"] = pp
    sc["training"]["global_batch"] = per_replica * dp
    _same_as_unfolded(sc, same_order=False)


def test_not_replicated_says_why():
    """Twins that differ (compute noise) run unfolded on the DAG pass, and the note says why."""
    sc = _scenario(simulation__compute_noise={"sigma": 0.05})
    res = cs.simulate(sc, progress=False)
    assert res.summary["evaluator"].startswith("dag (contention-free")
    assert "not replicated: twins differ: compute noise makes replicas differ" in res.summary["evaluator"]


def test_packet_network_is_not_replicated():
    """Twins that are twins, but on the packet fabric (sends share links): every GPU runs
    on SimPy, and the fabric's link spans are in the Result."""
    sc = _scenario(nodes=2, dp=2, simulation__network="packet", simulation__max_chunks=2)
    res = cs.simulate(sc, progress=False)
    assert res.summary["evaluator"].startswith("des (network 'packet' times sends by what shares their links")
    assert (res.spans["lane"] == "link").any()
    assert res.spans["device"].nunique() >= 16 + 1  # every GPU and links


@pytest.mark.parametrize("pp", [1, 4])
def test_the_breakdown_copied_to_twins_is_the_breakdown_of_every_gpu(pp, monkeypatch):
    # computed over the representatives' rows only, it must equal, to the bit, the breakdown
    # over every GPU's rows (one representative, pp = 1, included)
    import importlib

    from clustersim import metrics

    assemble = importlib.import_module("clustersim.trace.assemble")
    seen = []

    def compared(run, spans, window):
        got = real(run, spans, window)
        pd.testing.assert_frame_equal(got, metrics.device_breakdown(spans, window), check_exact=True)
        seen.append(len(got))
        return got

    real = assemble._breakdown
    monkeypatch.setattr(assemble, "_breakdown", compared)
    sc = _scenario(dp=32 // pp)
    sc["parallel"]["pp"] = pp
    res = cs.simulate(cs.load_scenario(sc), progress=False)
    assert res.summary["evaluator"].startswith(f"dag ×{64 // pp} replicas")
    assert seen == [res.summary["num_gpus"]]
