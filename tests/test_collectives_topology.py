"""Collectives on multi-node topologies: hierarchy, the auto choice, real contention."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import simpy

from clustersim.collectives import ALGORITHMS, Group, estimate_time, run_collective
from clustersim.collectives.bench import measure
from clustersim.collectives.registry import per_host
from clustersim.network import PacketFabric
from clustersim.record import Recorder
from clustersim.topology import build_topology

MiB = 1 << 20


def cluster(nodes, nic_bw=12.5e9, per_node=1, gpn=8):
    return {
        "nodes": nodes,
        "gpus_per_node": gpn,
        "pcie": None,
        "topology": {"kind": "fat_tree"},
        "intra_node": {"kind": "nvswitch", "bandwidth": 300e9, "latency": 1e-6, "efficiency": 1.0},
        "nic": {"bandwidth": nic_bw, "latency": 1e-6, "per_node": per_node, "efficiency": 1.0},
    }


@pytest.mark.parametrize("nbytes", [1 * MiB, 64 * MiB])
def test_hierarchical_beats_flat_ring_on_slow_nics(nbytes):
    c = cluster(4)  # one 100 Gbit/s NIC per node vs 300 GB/s NVSwitch
    ring = measure(c, "all_reduce", nbytes, "ring").time_s
    hier = measure(c, "all_reduce", nbytes, "hierarchical").time_s
    assert hier < ring


@pytest.mark.parametrize(
    "c", [cluster(4), cluster(2, nic_bw=25e9, per_node=8)], ids=["slow-nic-4n", "rail-2n"]
)
@pytest.mark.parametrize("nbytes", [1 * MiB, 16 * MiB, 128 * MiB])
def test_auto_is_within_5_percent_of_the_best(c, nbytes):
    hosts = (c["gpus_per_node"],) * c["nodes"]
    times = {  # every algorithm auto may pick here (registry metadata)
        a.name: measure(c, "all_reduce", nbytes, a.name).time_s
        for a in ALGORITHMS.values()
        if "all_reduce" in a.kinds
        and a.in_auto(sum(hosts), hosts)
        and a.fits("all_reduce", sum(hosts), hosts) is None
    }
    auto = measure(c, "all_reduce", nbytes, "auto")
    assert auto.time_s <= 1.05 * min(times.values()), (auto.algorithm, times)


def test_auto_considers_hierarchical_only_across_hosts():
    def group(nodes):
        graph = build_topology(cluster(nodes))
        return Group(simpy.Environment(), SimpleNamespace(graph=graph), [f"gpu{i}" for i in range(8 * nodes)])

    one, two = group(1), group(2)
    assert (per_host(one), per_host(two)) == ((8,), (8, 8))
    hier, ps = ALGORITHMS["hierarchical"], ALGORITHMS["parameter_server"]
    assert not hier.in_auto(8, per_host(one)) and hier.in_auto(16, per_host(two))
    assert not ps.in_auto(8, per_host(one)) and not ps.in_auto(16, per_host(two))
    # why: with one host, 2(m−1)(α + S/(mB)) is the ring's 2(n−1)α + 2(n−1)/n·S/B (m = n)
    shape = one.shape()
    assert estimate_time("all_reduce", "hierarchical", 8, 64 * MiB, **shape) == pytest.approx(
        estimate_time("all_reduce", "ring", 8, 64 * MiB, **shape), rel=1e-12
    )


def test_all_reduce_sharing_a_nic_with_other_traffic_is_slower():
    graph = build_topology(cluster(2, nic_bw=25e9, per_node=1))
    nbytes = 64 * MiB

    def run(with_collective: bool, with_background: bool) -> float:
        env = simpy.Environment()
        fabric = PacketFabric(env, Recorder(), graph, chunk_size=256 * 1024)
        events = []
        if with_collective:  # DP all-reduce between the two nodes (one NIC each)
            events.append(
                env.process(run_collective(env, fabric, "all_reduce", ["gpu0", "gpu8"], nbytes, "ring"))
            )
        if with_background:  # e.g. a pipeline send crossing the same NIC
            events.append(fabric.transfer("gpu1", "gpu9", nbytes, "pp send"))
        env.run(env.all_of(events))
        return env.now

    alone, other, both = run(True, False), run(False, True), run(True, True)
    assert both > alone * 1.2 and both > other * 1.2
