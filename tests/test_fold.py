"""Symmetry folding: one simulated GPU per stage stands for its TP/DP twins."""

import pytest

import clustersim as cs
from clustersim.resolve import fold
from clustersim.resolve.fold import AUTO_FOLD_MIN_GPUS


def _job(
    nodes: int, pp: int, oversubscription: float = 1, fold=False, m: int = 8, network: str = "packet"
) -> dict:
    return {
        "name": f"fold-{nodes * 8}gpu-pp{pp}",
        "cluster": {
            "preset": "dgx_a100",
            "nodes": nodes,
            "topology": {"kind": "fat_tree", "oversubscription": oversubscription},
        },
        "model": {
            "kind": "synthetic",
            "layers": 2 * pp,
            "forward": "2 ms",
            "backward": "4 ms",
            "activation": "64 MiB",
            "params": "512 MiB",
        },
        "training": {"global_batch": m * nodes * 8 // pp},
        "parallel": {"pp": pp},
        "simulation": {"network": network, "fold": fold, "max_chunks": 16},
    }


@pytest.mark.parametrize(
    "nodes,pp,over",
    [
        (8, 4, 1),  # 64 GPUs, dp 16, DP all-reduces across the fat tree
        (8, 8, 2),  # 64 GPUs, 2:1 oversubscribed: twins' shadow traffic shares the spines
        pytest.param(16, 4, 2, marks=pytest.mark.slow),  # 128 GPUs
    ],
)
def test_folded_agrees_with_unfolded(nodes, pp, over):
    full = cs.simulate(_job(nodes, pp, over, fold=False), progress=False)
    folded = cs.simulate(_job(nodes, pp, over, fold=True), progress=False)
    assert folded.summary["iteration_time_s"] == pytest.approx(full.summary["iteration_time_s"], rel=0.02)
    # the GPU's idle time (1 − compute) agrees; its split into bubble and exposed DP traffic
    # may not where the twins' shadow all-reduces contend on oversubscribed spines
    idle = {
        k: r.summary["bubble_fraction"] + r.summary["exposed_comm_fraction"]
        for k, r in (("f", folded), ("u", full))
    }
    assert abs(idle["f"] - idle["u"]) < 0.01
    assert folded.summary["num_gpus"] == full.summary["num_gpus"] == nodes * 8
    assert folded.summary["folded"].startswith("yes")
    # every GPU has a row; twins mirror their representative
    assert len(folded.devices) == nodes * 8
    rows = folded.devices.set_index("device")
    assert rows.loc["gpu1", "bubble_fraction"] == rows.loc["gpu0", "bubble_fraction"]
    assert rows.loc["gpu1", "peak_memory_bytes"] == rows.loc["gpu0", "peak_memory_bytes"]
    # only one GPU per stage was simulated
    gpus = folded.spans.loc[folded.spans["lane"] != "link", "device"].unique()
    assert len(gpus) == pp


def _shared_nic_job(fold) -> dict:
    # 2 nodes × 4 GPUs with ONE NIC each; pp 2 across the nodes, dp 4: all four replicas'
    # activations squeeze through the same NIC pair.
    return {
        "cluster": {
            "nodes": 2,
            "gpus_per_node": 4,
            "nic": {"bandwidth": "100 Gbit/s", "per_node": 1},
            "topology": {"kind": "fat_tree"},
        },
        "model": {
            "kind": "synthetic",
            "layers": 2,
            "forward": "1 ms",
            "backward": "2 ms",
            "activation": "256 MiB",
        },
        "training": {"global_batch": 16},
        "parallel": {"pp": 2, "dp": 4},
        "simulation": {"network": "packet", "fold": fold, "max_chunks": 32},
    }


def test_shadow_traffic_is_what_keeps_folding_honest():
    import simpy

    from clustersim.engine.interpreter import Engine
    from clustersim.engine.network_setup import build_network
    from clustersim.record import Recorder
    from clustersim.resolve import resolve

    full = cs.simulate(_shared_nic_job(False), progress=False).summary["iteration_time_s"]
    folded = cs.simulate(_shared_nic_job(True), progress=False).summary["iteration_time_s"]
    assert folded == pytest.approx(full, rel=0.02)
    sc = cs.load_scenario(_shared_nic_job(True))
    prog = cs.compile_scenario(sc)
    for op in prog.ops:  # the same folded program without the twins' traffic
        op.shadows = ()
    env, rec = simpy.Environment(), Recorder()
    Engine(prog, env, build_network(resolve(sc), env, rec), rec, [2**40] * prog.num_devices).run()
    assert max(e for _, _, e in rec.ops) < 0.5 * full  # would be far too optimistic


def test_fold_true_is_refused_with_the_reason():
    raw = _job(2, 2, fold=True)
    raw["cluster"]["stragglers"] = [{"gpus": [3], "slowdown": 1.5}]
    with pytest.raises(
        cs.ScenarioError, match="simulation.fold: True is invalid; cannot fold this scenario: stragglers"
    ):
        cs.simulate(raw, progress=False)
    raw["simulation"]["fold"] = "auto"
    res = cs.simulate(raw, progress=False)
    assert res.summary["folded"] == "no (stragglers make replicas differ)"


def test_fold_is_refused_when_a_window_degrades_some_links():
    raw = _job(2, 2, fold=True)
    raw["cluster"]["link_degradations"] = [
        {"between": ["gpu9", "nvswitch1"], "start": 0, "end": 1, "factor": 0.5}
    ]
    with pytest.raises(cs.ScenarioError, match="cannot fold this scenario: link degradation windows"):
        cs.simulate(raw, progress=False)


def test_auto_folds_large_jobs_only():
    small = cs.simulate(_job(2, 2, fold="auto", network="analytical"), progress=False)
    assert small.summary["folded"].startswith("no (auto folds from")
    big = cs.simulate(
        _job(AUTO_FOLD_MIN_GPUS // 8, 8, fold="auto", m=2, network="analytical"), progress=False
    )
    assert big.summary["folded"].startswith("yes")


def _gpt(nodes: int, tp: int, pp: int, oversubscription: float, fold) -> dict:
    dp = nodes * 8 // (tp * pp)
    return {
        "name": f"gpt-1.3b-{nodes * 8}gpu-tp{tp}-pp{pp}-dp{dp}",
        "cluster": {
            "preset": "dgx_a100",
            "nodes": nodes,
            "topology": {"kind": "fat_tree", "oversubscription": oversubscription},
        },
        "model": {"kind": "transformer", "preset": "gpt-1.3b"},
        "training": {"global_batch": 8 * dp, "micro_batch": 1},
        "parallel": {"tp": tp, "pp": pp, "dp": dp},
        "simulation": {"network": "packet", "fold": fold, "granularity": "stage", "max_chunks": 8},
    }


@pytest.mark.parametrize(
    "nodes,tp,pp,over",
    [
        (8, 2, 4, 1),  # 64 GPUs: TP collectives on NVSwitch, DP all-reduces over the fat tree
        (16, 4, 4, 2),  # 128 GPUs, 2:1 oversubscribed spines
        pytest.param(64, 8, 8, 2, marks=pytest.mark.slow),  # 512 GPUs
    ],
)
def test_folded_agrees_with_unfolded_with_tensor_parallelism(nodes, tp, pp, over):
    full = cs.simulate(_gpt(nodes, tp, pp, over, False), progress=False).summary
    folded = cs.simulate(_gpt(nodes, tp, pp, over, True), progress=False).summary
    assert folded["iteration_time_s"] == pytest.approx(full["iteration_time_s"], rel=0.02)
    assert abs(folded["bubble_fraction"] - full["bubble_fraction"]) < 0.01
    assert folded["tflops_per_gpu"] == pytest.approx(full["tflops_per_gpu"], rel=0.02)


def _straddling(topology: dict, nodes: int, gpus_per_node: int, pp: int) -> dict:
    # stage s holds GPUs [s·n, (s+1)·n), n = GPUs / pp: a stage whose GPUs straddle a leaf or
    # site border sends to the next stage across it from some replicas only
    return {
        "name": "straddling",
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "intra_node": {"bandwidth": "300 GB/s", "latency": "2 us"},
            "nic": {"bandwidth": "100 Gbit/s", "latency": "4 us", "per_node": 1},
            "topology": topology,
        },
        "model": {
            "kind": "synthetic",
            "layers": pp,
            "forward": "2 ms",
            "backward": "4 ms",
            "activation": "64 MiB",
        },
        "training": {"global_batch": nodes * gpus_per_node},
        "parallel": {"pp": pp},
        "simulation": {"network": "analytical", "fold": True},
    }


NIC_B, NVLINK_B, WAN_B = 100e9 / 8, 300e9, 1e9 / 8  # _straddling's links, bytes/s


@pytest.mark.parametrize(
    "raw,straddler,level,rep_level,rep_route,straddler_route",
    [
        # 6 servers, 3 per leaf, 2 per stage: stage 1 = server 2 (leaf 0) + server 3 (leaf 1).
        # Under one leaf: NIC → leaf → NIC, 2 × 2 µs; across: also leaf → spine → leaf, whose
        # 2 µs links (half the NIC latency) carry 3 servers' NICs: 37.5 GB/s, not the bottleneck
        (
            _straddling({"kind": "fat_tree", "nodes_per_leaf": 3}, 6, 8, 3),
            8,
            "one site",
            "one leaf switch",
            (4e-6, NIC_B),
            (8e-6, NIC_B),
        ),
        # two sites of one 6-GPU server, 4 GPUs per stage: stage 1 = GPUs 4, 5 (site 0) + 6, 7 (site 1).
        # In one server: GPU → NVSwitch → GPU, 2 µs; across: the 20 ms, 1 Gbit/s WAN link (a
        # one-server site's NICs join its gateway by free wires)
        (
            _straddling(
                {
                    "kind": "wan",
                    "bandwidth": "1 Gbit/s",
                    "latency": "20 ms",
                    "sites": [{"nodes": 1}, {"nodes": 1}],
                },
                2,
                6,
                3,
            ),
            2,
            "two sites",
            "one server",
            (2e-6, NVLINK_B),
            (20e-3, WAN_B),
        ),
    ],
)
def test_fold_is_refused_when_a_replica_crosses_a_border_the_representative_does_not(
    raw, straddler, level, rep_level, rep_route, straddler_route
):
    with pytest.raises(
        cs.ScenarioError,
        match=f"stage 0's replica {straddler}, TP rank 0 sends to stage 1 "
        f"within {level}, replica 0 within {rep_level}",
    ):
        cs.simulate(raw, progress=False)
    # and the refusal is real: unfolded, each replica's first 64 MiB send takes its own
    # route's idle α–β time, and the straddler's is longer
    raw["simulation"]["fold"] = False
    spans = cs.simulate(raw, progress=False).spans
    sends = spans[spans["name"] == "send F0 s0->s1"].set_index("device")
    took = sends["end_s"] - sends["start_s"]
    for gpu, (latency, bandwidth) in ((0, rep_route), (straddler, straddler_route)):
        assert took[f"gpu{gpu}"] == pytest.approx(latency + 64 * 2**20 / bandwidth, rel=1e-9)


def test_fold_is_refused_where_routes_depend_on_position(monkeypatch):
    raw = _straddling({"kind": "ring"}, 4, 1, 2)
    with pytest.raises(cs.ScenarioError, match="routes on a ring topology depend on where a GPU sits"):
        cs.simulate(raw, progress=False)
    # auto, on a job big enough to fold, runs unfolded and says why
    monkeypatch.setattr(fold, "AUTO_FOLD_MIN_GPUS", 4)
    raw["simulation"]["fold"] = "auto"
    assert (
        cs.simulate(raw, progress=False).summary["folded"]
        == "no (routes on a ring topology depend on where a GPU sits; folding is not checked there)"
    )


@pytest.mark.parametrize("tp,pp,dp,cp", [(1, 2, 1, 1), (2, 4, 3, 1), (8, 3, 4, 2), (4, 2, 1, 1)])
def test_twin_pairs_are_every_other_dp_and_tp_ranks_devices(tp, pp, dp, cp):
    # the devices a folded transfer's shadows name: Plan.device of both stages at every
    # (replica, tp rank) but the representatives' (0, 0), in that order — a replica is a
    # (CP rank, dp rank): with cp > 1 every CP rank's sends are twins too
    from clustersim.parallel.plan import Plan

    plan = Plan(tp=tp, pp=pp, dp=dp, gpus_per_node=8, cp=cp)
    for a in range(pp):
        for b in range(pp):
            want = [
                (plan.device(a, rr, tt), plan.device(b, rr, tt))
                for rr in range(dp * cp)
                for tt in range(tp)
                if (rr, tt) != (0, 0)
            ]
            assert list(plan.twin_pairs(a, b)) == want


def _layers(fold, tp: int = 8, pp: int = 1, overlap: bool = True, **simulation) -> dict:
    # 16 H100s at layer granularity; ``overlap``: TP overlap's userbuffers chunks as sends
    # around each TP ring (clustersim/compilers/pipeline/tp_overlap.py)
    dp = 16 // (tp * pp)
    return {
        "name": f"layers-tp{tp}-pp{pp}-overlap{overlap}",
        "cluster": {
            "preset": "dgx_h100",
            "nodes": 2,
            "topology": {"kind": "fat_tree", "oversubscription": 2},
        },
        "model": {"preset": "gpt-1.3b", "seq_len": 1024},
        "training": {"global_batch": 4 * dp, "micro_batch": 1},
        "parallel": {"tp": tp, "pp": pp, "sequence_parallel": True, "tp_comm_overlap": overlap},
        "simulation": {"fidelity": "fast", "granularity": "layer", "fold": fold, **simulation},
    }


#: what a folded run's summary says differently: that it folded, on which evaluator, its own
#: events and wall time
_RUN_NOTES = ("folded", "evaluator", "sim_events", "wall_time_s")


@pytest.mark.parametrize("tp,pp,overlap", [(8, 1, True), (4, 2, True), (4, 2, False)])
def test_folded_layer_granularity_is_the_unfolded_run(tp, pp, overlap):
    # contention-free, twins are exact twins: every simulated GPU's spans are its spans in
    # the unfolded run (every GPU on SimPy), to the bit, and so is the summary
    import pandas as pd

    full = cs.simulate(_layers(False, tp, pp, overlap, evaluator="des"), progress=False)
    folded = cs.simulate(_layers(True, tp, pp, overlap), progress=False)
    assert folded.summary["folded"].startswith("yes")
    reps = folded.spans["device"].unique()
    assert len(reps) == pp
    if overlap:
        assert (folded.spans["lane"] == "tp recv").any()
    want = full.spans[full.spans["device"].isin(reps)].reset_index(drop=True)
    pd.testing.assert_frame_equal(folded.spans.reset_index(drop=True), want, check_exact=True)
    assert {k: v for k, v in folded.summary.items() if k not in _RUN_NOTES} == {
        k: v for k, v in full.summary.items() if k not in _RUN_NOTES
    }


def test_folded_tp_ring_sends_stand_for_the_previous_rank():
    # each representative's userbuffers send is paired with its own recv and leaves from TP
    # rank tp − 1 (the rank feeding that recv unfolded); every other hop of the stage's TP
    # rings (dp rings of tp hops, t → t + 1) is a shadow, the representative's own first
    plan_tp, dp, pp = 4, 2, 2
    prog = cs.compile_scenario(cs.load_scenario(_layers(True, plan_tp, pp)))
    sends = [op for op in prog.ops if op.lane == "tp send"]
    assert sends
    for op in sends:
        rep = op.device
        assert prog.ops[op.peer].device == rep
        assert op.source == rep + plan_tp - 1
        hops = {
            (rep + r * plan_tp + t, rep + r * plan_tp + (t + 1) % plan_tp)
            for r in range(dp)
            for t in range(plan_tp)
        }
        assert op.shadows[0] == (rep, rep + 1)
        assert len(op.shadows) == len(hops) - 1
        assert set(op.shadows) == hops - {(op.source, rep)}


def test_folded_tp_overlap_under_contention_agrees_with_unfolded():
    # the flow network on a 2:1 fat tree: the folded ring sends take their sources' routes
    # and load the others' as shadows
    full = cs.simulate(_layers(False, fidelity="balanced"), progress=False).summary
    folded = cs.simulate(_layers(True, fidelity="balanced"), progress=False).summary
    assert folded["folded"].startswith("yes")
    assert folded["iteration_time_s"] == pytest.approx(full["iteration_time_s"], rel=0.01)


def test_tp_overlap_refusals_still_name_their_reason():
    raw = _layers(True)
    raw["cluster"]["stragglers"] = [{"gpus": [3], "slowdown": 1.5}]
    with pytest.raises(cs.ScenarioError, match="cannot fold this scenario: stragglers make replicas differ"):
        cs.simulate(raw, progress=False)
