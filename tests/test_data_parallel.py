"""Data parallelism in the engine: gradient all-reduce as a collective on the fabric,
presets in scenarios, and compute–communication interference."""

import pytest
import simpy

import clustersim as cs
from clustersim.engine.interpreter import Engine
from clustersim.network import DirectFabric
from clustersim.record import Recorder
from tests.conftest import synthetic


@pytest.mark.parametrize("p,m", [(1, 4), (2, 4), (4, 6)])
def test_dp_allreduce_adds_ring_time_after_the_last_backward(p, m):
    # The first stage finishes its backwards last, at (m + p − 1)(f + b); its gradient
    # all-reduce over n = 2 replicas (ring on a private link per pair, bandwidth B, link
    # latency l, per-step α) takes 2(n−1)(α + l) + 2(n−1)/n · S/B; then the optimizer.
    f, b, opt, S, B, lat, alpha, n = 1e-3, 2e-3, 3e-4, 64 * 2**20, 50e9, 2e-6, 5e-6, 2
    raw = synthetic(p, m, f, b, dp=n, params=S, optimizer=opt, bandwidth=B, latency=lat)
    raw["cluster"]["collective_alpha"] = {"intra_node": alpha, "inter_node": alpha}
    raw["simulation"]["collectives"] = {"all_reduce": "ring"}
    res = cs.simulate(raw)
    t_ar = 2 * (n - 1) * (alpha + lat) + 2 * (n - 1) / n * S / B
    expected = (m + p - 1) * (f + b) + t_ar + opt
    assert res.summary["iteration_time_s"] == pytest.approx(expected, rel=0.02)
    ar = res.spans[res.spans["kind"] == "collective"]
    assert len(ar) == p * n  # one per stage per replica
    assert (ar["bytes"] == S).all()
    # every member's span starts after the last member arrived: replicas are symmetric
    for _, g in ar.groupby("stage"):
        assert g["start_s"].nunique() == 1 and g["end_s"].nunique() == 1


def test_dp_replicas_without_allreduce_bytes_match_the_pipeline():
    f, b, p, m = 1e-3, 2e-3, 3, 5
    raw = synthetic(p, m, f, b, dp=2)
    raw["cluster"]["collective_alpha"] = {"intra_node": 0.0, "inter_node": 0.0}
    res = cs.simulate(raw)
    assert res.summary["iteration_time_s"] == pytest.approx((m + p - 1) * (f + b), rel=1e-12)
    assert res.summary["num_gpus"] == 6 and res.summary["dp"] == 2


def test_preset_cluster_runs_dp_over_nics():
    raw = {
        "name": "dp over two DGX A100",
        "cluster": {"preset": "dgx_a100", "nodes": 2},
        "model": {
            "kind": "synthetic",
            "layers": 2,
            "forward": "2 ms",
            "backward": "4 ms",
            "activation": "32 MiB",
            "params": "256 MiB",
        },
        "training": {"global_batch": 64},
        "parallel": {"pp": 2, "dp": 8},
    }
    sc = cs.load_scenario(raw)
    assert sc.cluster.gpu == "A100-SXM4-80GB" and sc.cluster.nic.efficiency == pytest.approx(0.94)
    res = cs.simulate(sc)
    util = res.utilization()
    nic_links = util[(util["lane"] == "link") & util["device"].str.contains("nic")]
    assert nic_links["bytes"].sum() > 0  # gradients crossed the NICs
    assert res.summary["exposed_comm_fraction"] > 0


def test_user_fields_override_the_preset():
    sc = cs.load_scenario(
        {
            "cluster": {"preset": "dgx_a100", "nodes": 1, "nic": {"bandwidth": "100 Gbit/s"}},
            "model": {"kind": "synthetic", "layers": 8, "forward": 1e-3, "backward": 2e-3},
            "training": {"global_batch": 8},
            "parallel": {"pp": 8},
        }
    )
    assert sc.cluster.nic.bandwidth == pytest.approx(12.5e9)
    assert sc.cluster.nic.efficiency == pytest.approx(0.94)  # the rest of the preset stays


def test_unknown_preset_and_algorithm_are_clear_errors():
    base = synthetic(2, 2)
    with pytest.raises(cs.ScenarioError, match="cluster.preset: 'dgx_z100' is invalid.*dgx_a100"):
        cs.load_scenario(base).with_overrides({"cluster.preset": "dgx_z100"})
    with pytest.raises(
        cs.ScenarioError, match=r"simulation.collectives: .*'hyper' is not an algorithm for all_reduce"
    ):
        cs.load_scenario(base).with_overrides({"simulation.collectives": {"all_reduce": "hyper"}})
    with pytest.raises(cs.ScenarioError, match="cluster.collective_alpha.cross"):
        cs.load_scenario(base).with_overrides({"cluster.collective_alpha": {"cross": 1e-6}})


@pytest.mark.parametrize("k", [1.5, 2.0, 4.0])
def test_compute_slows_while_a_collective_runs_on_its_gpu(k):
    # gpu0 computes for D while it takes part in an all-reduce lasting C < D from t = 0:
    # during the collective it progresses at 1/k, so it ends at C + (D − C/k).
    D = 10e-3
    prog = cs.Program(2)
    comp = prog.add(0, "compute", "compute", "F0", duration=D)
    for dev in (0, 1):
        prog.add(
            dev, "comm", "collective", "ar", nbytes=2**26, group=(0, 1), collective="all_reduce", tag="ar"
        )
    env, rec = simpy.Environment(), Recorder()
    Engine(
        prog, env, DirectFabric(env, rec, 25e9, 0.0), rec, [2**40] * 2, alpha=0.0, comm_compute_slowdown=k
    ).run()
    times = {i: (s, e) for i, s, e in rec.ops}
    C = times[1][1]
    assert 0 < C < D
    assert times[comp.id][1] == pytest.approx(C + D - C / k, rel=1e-12)


def test_no_slowdown_by_default():
    D = 10e-3
    prog = cs.Program(2)
    prog.add(0, "compute", "compute", "F0", duration=D)
    for dev in (0, 1):
        prog.add(
            dev, "comm", "collective", "ar", nbytes=2**26, group=(0, 1), collective="all_reduce", tag="ar"
        )
    env, rec = simpy.Environment(), Recorder()
    Engine(prog, env, DirectFabric(env, rec, 25e9, 0.0), rec, [2**40] * 2).run()
    assert {i: e for i, _, e in rec.ops}[0] == pytest.approx(D, rel=1e-15)


def _nic_contention(with_allreduce: bool, with_send: bool):
    from clustersim.engine.network_setup import build_network
    from clustersim.resolve import resolve

    sc = cs.load_scenario(
        {
            "cluster": {
                "nodes": 2,
                "gpus_per_node": 2,
                "nic": {"bandwidth": "100 Gbit/s", "per_node": 1},
                "topology": {"kind": "fat_tree"},
            },
            "model": {"kind": "synthetic", "layers": 4, "forward": 1e-3, "backward": 1e-3},
            "training": {"global_batch": 1},
            "parallel": {"pp": 4},
            "simulation": {"network": "packet", "max_chunks": 64},
        }
    )
    prog = cs.Program(4)
    ar = []
    if with_allreduce:  # the DP gradient all-reduce of gpu0 and gpu2, across the nodes
        ar = [
            prog.add(
                d,
                "comm",
                "collective",
                "dp all-reduce",
                nbytes=2**26,
                group=(0, 2),
                collective="all_reduce",
                tag="dp",
                algorithm="ring",
            )
            for d in (0, 2)
        ]
    recv = None
    if with_send:  # a pipeline send gpu1 → gpu3 through the same NICs
        s = prog.add(1, "send", "send", "send F0 s0->s1", nbytes=2**26)
        recv = prog.add(3, "recv", "recv", "recv F0 s0->s1", nbytes=2**26, peer=s.id)
        s.peer = recv.id
    prog.check()
    env, rec = simpy.Environment(), Recorder()
    Engine(prog, env, build_network(resolve(sc), env, rec), rec, [2**40] * 4).run()
    ends = {i: e for i, _, e in rec.ops}
    return (ends[ar[0].id] if ar else None), (ends[recv.id] if recv else None), rec.spans


def test_dp_allreduce_and_pipeline_send_contend_on_the_nic():
    ar_alone, _, _ = _nic_contention(True, False)
    _, send_alone, _ = _nic_contention(False, True)
    ar_both, send_both, link_spans = _nic_contention(True, True)
    assert ar_both > ar_alone * 1.2 and send_both > send_alone * 1.2
    # the NIC uplink of node 0 carries both flows, and its utilization shows both
    nic_up = [sp for sp in link_spans if sp[0].startswith("node0.nic") and "leaf" in sp[0]]
    labels = {sp[3] for sp in nic_up}
    assert "dp" in labels and "send F0 s0->s1" in labels
