"""Collective algorithms against their closed α-β forms on idle fabrics."""

from __future__ import annotations

import math

import pytest
import simpy

from clustersim.collectives import ALGORITHMS, Options, Tuning, run_collective
from clustersim.network import DirectFabric, PacketFabric
from clustersim.record import Recorder
from clustersim.topology import build_topology

MiB = 1 << 20


def single_node(n: int, bw: float, latency: float = 0.0) -> dict:
    return {
        "nodes": 1,
        "gpus_per_node": n,
        "gpu": "H100-SXM5-80GB",  # an NVSwitch with NVLink SHARP, so nvls runs too
        "pcie": None,
        "topology": {"kind": "single_node"},
        "intra_node": {"kind": "nvswitch", "bandwidth": bw, "latency": latency, "efficiency": 1.0},
        "nic": {"bandwidth": 25e9, "latency": 1e-6, "efficiency": 1.0},
    }


def run(fabric_of, kind, n, nbytes, algorithm, alpha, **kw):
    env = simpy.Environment()
    fabric = fabric_of(env)
    members = [f"gpu{i}" for i in range(n)]
    proc = env.process(
        run_collective(env, fabric, kind, members, nbytes, algorithm, Tuning(alpha), Options(**kw))
    )
    env.run(proc)
    return env.now, proc.value


def packet(n, bw, nbytes):
    # chunks far below one message (S/n) so store-and-forward adds < 0.5 %
    graph = build_topology(single_node(n, bw))
    return lambda env: PacketFabric(env, Recorder(), graph, chunk_size=max(4096, nbytes // (n * 256)))


@pytest.mark.parametrize("n", [2, 5, 8])
@pytest.mark.parametrize("nbytes", [1 * MiB, 64 * MiB])
def test_ring_all_reduce_matches_textbook_on_direct_fabric(n, nbytes):
    bw, alpha = 50e9, 7e-6
    t, _ = run(lambda env: DirectFabric(env, Recorder(), bw, 0.0), "all_reduce", n, nbytes, "ring", alpha)
    expected = 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bw
    assert t == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("kind,steps", [("all_reduce", 2), ("reduce_scatter", 1), ("all_gather", 1)])
def test_ring_matches_textbook_on_packet_switch(kind, steps):
    n, bw, alpha, nbytes = 8, 100e9, 5e-6, 32 * MiB
    t, _ = run(packet(n, bw, nbytes), kind, n, nbytes, "ring", alpha)
    expected = steps * ((n - 1) * alpha + (n - 1) / n * nbytes / bw)
    assert t == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_gather"])
def test_halving_doubling_matches_textbook(n, kind):
    bw, alpha, nbytes = 100e9, 5e-6, 32 * MiB
    t, _ = run(packet(n, bw, nbytes), kind, n, nbytes, "halving_doubling", alpha)
    phases = 2 if kind == "all_reduce" else 1
    expected = phases * (math.log2(n) * alpha + (n - 1) / n * nbytes / bw)
    assert t == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("nbytes", [1 * MiB, 64 * MiB])
def test_tree_matches_pipelined_tree_form(n, nbytes):
    # double binary tree: each tree carries S/2 in k pipeline chunks (32 KiB each, at most
    # 64) down d = ⌊log2 n⌋ levels, reduce then broadcast: 2·(d·α + (k + d − 1)·S/(k·B))
    bw, alpha = 100e9, 5e-6
    t, _ = run(packet(n, bw, nbytes), "all_reduce", n, nbytes, "tree", alpha)
    d, k = int(math.log2(n)), min(64, math.ceil(nbytes / 2 / (32 * 1024)))
    assert t == pytest.approx(2 * (d * alpha + (k + d - 1) * nbytes / (k * bw)), rel=0.02)
    # and for large messages NCCL's tree model: 2·log2(n)·α + 2·S/B
    if nbytes >= 64 * MiB:
        assert t == pytest.approx(2 * math.log2(n) * alpha + 2 * nbytes / bw, rel=0.05)


@pytest.mark.parametrize(
    "algorithm,kind",
    [("direct", "all_to_all"), ("direct", "all_gather"), ("ring", "broadcast"), ("ring", "reduce")],
)
def test_other_schedules_match_their_forms(algorithm, kind):
    n, bw, alpha, nbytes = 8, 100e9, 5e-6, 16 * MiB
    t, _ = run(packet(n, bw, nbytes), kind, n, nbytes, algorithm, alpha)
    if algorithm == "direct":  # one step: every rank exchanges its (n−1)/n share at once
        expected = alpha + (n - 1) / n * nbytes / bw
    else:  # ring chain: n−1 hops, S pipelined in k chunks (32 KiB each, at most 64)
        k = min(64, math.ceil(nbytes / (32 * 1024)))
        expected = (n - 1) * alpha + nbytes / bw * (1 + (n - 2) / k)
    assert t == pytest.approx(expected, rel=0.02)


def test_halving_doubling_all_reduce_on_non_power_of_two_adds_the_fold():
    n, bw, alpha, nbytes = 6, 100e9, 5e-6, 16 * MiB
    t, _ = run(packet(n, bw, nbytes), "all_reduce", n, nbytes, "halving_doubling", alpha)
    textbook = 2 * (2 * alpha + 3 / 4 * nbytes / bw) + 2 * (alpha + nbytes / bw)
    # the fold's receivers also get their first exchange partner's S/2 while the fold
    # arrives (nobody holds that send back): at most S/(2B) of contention on top
    assert textbook * 0.99 <= t <= textbook + nbytes / (2 * bw) * 1.02


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_algorithm_runs_every_kind_it_claims(algorithm):
    n, nbytes = 6, 3 * MiB
    for kind in ALGORITHMS[algorithm].kinds:
        if algorithm == "halving_doubling" and kind in ("reduce_scatter", "all_gather"):
            continue  # power-of-two only; checked in test_collectives_errors
        if algorithm == "pat":
            continue  # one GPU per node only; checked in test_nccl_algorithms
        t, finish = run(packet(n, 100e9, nbytes), kind, n, nbytes, algorithm, 1e-6)
        assert t > 0, (algorithm, kind)
        assert set(finish) == {f"gpu{i}" for i in range(n)}
        assert max(finish.values()) == pytest.approx(t)
        assert all(0 <= v <= t for v in finish.values())


def test_finish_times_differ_per_member_for_broadcast_chain():
    n, nbytes = 4, 8 * MiB
    _, finish = run(packet(n, 100e9, nbytes), "broadcast", n, nbytes, "ring", 1e-6, root="gpu0")
    # a member is done when its own last message has landed: along the chain
    # gpu0 → gpu1 → gpu2 → gpu3 each forwarder is done later than its predecessor
    assert finish["gpu0"] < finish["gpu1"] < finish["gpu2"] == finish["gpu3"]


def test_single_member_and_barrier_are_cheap():
    t, finish = run(packet(4, 100e9, MiB), "all_reduce", 1, MiB, "ring", 5e-6)
    assert t == 0 and finish == {"gpu0": 0}
    t, _ = run(packet(4, 100e9, MiB), "barrier", 4, 0, "auto", 5e-6)
    assert 0 < t < 1e-4
