"""Pipeline sends from the engine travel over the topology's links (packet and analytical models)."""

import pytest
import simpy

import clustersim as cs
from clustersim.engine.network_setup import build_network
from clustersim.record import Recorder
from clustersim.resolve import resolve

MiB = 2**20


def _two_node_pipeline(network: str, chunk=MiB, act=16 * MiB) -> dict:
    return {
        "name": "2 stages on 2 nodes",
        "cluster": {
            "nodes": 2,
            "gpus_per_node": 1,
            "nic": {"bandwidth": "100 Gbit/s", "latency": "2 us"},
            "topology": {"kind": "fat_tree"},
        },
        "model": {"kind": "synthetic", "layers": 2, "forward": "3 ms", "backward": "5 ms", "activation": act},
        "training": {"global_batch": 1},
        "parallel": {"pp": 2},
        "simulation": {"network": network, "chunk_size": chunk},
    }


def _route(sc):
    env, rec = simpy.Environment(), Recorder()
    fabric = build_network(resolve(sc), env, rec)
    return fabric.route("gpu0", "gpu1")


def test_packet_pipeline_transfer_matches_store_and_forward_formula():
    sc = cs.load_scenario(_two_node_pipeline("packet"))
    links = _route(sc)
    assert len(links) >= 2  # the activation crosses NIC, leaf switch, NIC
    S, c = 16 * MiB, MiB
    # S is a whole number of chunks k: the first chunk crosses every link, the other k − 1
    # follow at the bottleneck's pace; latency adds once per link.
    t_x = (
        sum(lk.latency for lk in links)
        + sum(c / lk.bandwidth for lk in links)
        + (S // c - 1) * c / min(lk.bandwidth for lk in links)
    )
    res = cs.simulate(sc)
    # m = 1: forward wave, one activation transfer, backward wave, one gradient transfer
    assert res.summary["iteration_time_s"] == pytest.approx(2 * 3e-3 + 2 * 5e-3 + 2 * t_x, rel=1e-9)
    link_spans = res.spans[res.spans["lane"] == "link"]
    # both directions' bytes are on the links: each crossed len(links) links once
    assert link_spans["bytes"].sum() == 2 * S * len(links)


def test_analytical_is_latency_plus_bottleneck():
    sc = cs.load_scenario(_two_node_pipeline("analytical"))
    links = _route(cs.load_scenario(_two_node_pipeline("packet")))
    t_x = sum(lk.latency for lk in links) + 16 * MiB / min(lk.bandwidth for lk in links)
    res = cs.simulate(sc)
    assert res.summary["iteration_time_s"] == pytest.approx(2 * 3e-3 + 2 * 5e-3 + 2 * t_x, rel=1e-9)


def test_intra_node_pipeline_stays_on_nvswitch():
    raw = _two_node_pipeline("packet")
    raw["cluster"].update(nodes=1, gpus_per_node=2, topology={"kind": "auto"})
    res = cs.simulate(raw)
    used = set(res.spans.loc[res.spans["lane"] == "link", "device"])
    assert used and all("nvswitch" in name for name in used)


def test_max_chunks_caps_events_within_the_stated_bound():
    # A 64 MiB message over h links with at most K chunks: the extra store-and-forward
    # delay is (h − 1)·c/B with c = S/K, so the time grows by at most (h − 1)/K of S/B.
    base = _two_node_pipeline("packet", chunk=256 * 1024, act=64 * MiB)
    fine = cs.simulate(base)
    base["simulation"]["max_chunks"] = 8
    coarse = cs.simulate(base)
    links = _route(cs.load_scenario(base))
    h, B = len(links), min(lk.bandwidth for lk in links)
    S = 64 * MiB
    extra = coarse.summary["iteration_time_s"] - fine.summary["iteration_time_s"]
    # two transfers per iteration (activation and gradient), equal-bandwidth links
    assert extra == pytest.approx(2 * (h - 1) * (S / 8 - 256 * 1024) / B, rel=1e-6)
    assert coarse.summary["sim_events"] < fine.summary["sim_events"] / 10
