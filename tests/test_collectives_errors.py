"""Bad collective calls are ScenarioErrors that name the field and what is accepted."""

from __future__ import annotations

import pytest
import simpy

from clustersim.collectives import ALGORITHMS, Options, Tuning, run_collective
from clustersim.errors import ScenarioError
from clustersim.network import DirectFabric, PacketFabric
from clustersim.record import Recorder
from clustersim.topology import build_topology


def packet_fabric(env, n=4, nodes=1):
    cluster = {
        "nodes": nodes,
        "gpus_per_node": n,
        "pcie": None,
        "topology": {"kind": "single_node" if nodes == 1 else "fat_tree"},
        "intra_node": {"kind": "nvswitch", "bandwidth": 1e11, "latency": 1e-6, "efficiency": 1.0},
        "nic": {"bandwidth": 25e9, "latency": 1e-6, "efficiency": 1.0},
    }
    return PacketFabric(env, Recorder(), build_topology(cluster))


def call(members, kind="all_reduce", algorithm="auto", fabric=None, **kw):
    env = simpy.Environment()
    fabric = fabric(env) if fabric else packet_fabric(env)
    nbytes, tuning = kw.pop("nbytes", 1024), Tuning(kw.pop("alpha", None))
    env.run(env.process(run_collective(env, fabric, kind, members, nbytes, algorithm, tuning, Options(**kw))))


def error_of(*args, **kw) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        call(*args, **kw)
    return info.value


def test_empty_group():
    err = error_of([])
    assert err.field == "collective.members"
    assert "non-empty list" in str(err)


def test_duplicate_member():
    err = error_of(["gpu0", "gpu1", "gpu0"])
    assert err.field == "collective.members" and err.value == "gpu0"
    assert "duplicate member" in str(err)


def test_member_not_in_topology():
    err = error_of(["gpu0", "gpu9"])
    assert err.field == "collective.members" and err.value == "gpu9"
    assert "not a node of the fabric's topology" in str(err)


def test_unknown_algorithm_lists_known():
    err = error_of(["gpu0", "gpu1"], algorithm="rign")
    assert err.field == "collective.algorithm"
    assert str(err).endswith(f"known algorithms: auto, nccl, {', '.join(ALGORITHMS)}")


def test_unknown_kind_lists_known():
    err = error_of(["gpu0", "gpu1"], kind="allreduce")
    assert err.field == "collective.kind"
    assert "all_reduce" in str(err) and "all_to_all" in str(err)


def test_algorithm_that_cannot_do_the_kind_lists_those_that_can():
    err = error_of(["gpu0", "gpu1"], kind="all_to_all", algorithm="ring")
    assert err.field == "collective.algorithm"
    assert "ring does not implement all_to_all; algorithms for all_to_all: direct" in str(err)


def test_halving_doubling_reduce_scatter_needs_power_of_two():
    err = error_of(["gpu0", "gpu1", "gpu2"], kind="reduce_scatter", algorithm="halving_doubling")
    assert err.field == "collective.algorithm"
    assert "power-of-two group; got 3 members" in str(err)


def test_hierarchical_needs_equal_hosts():
    err = error_of(
        ["gpu0", "gpu1", "gpu4"], algorithm="hierarchical", fabric=lambda env: packet_fabric(env, 4, 2)
    )
    assert err.field == "collective.algorithm"
    assert "same number of members on every host; got [1, 2]" in str(err)


def test_root_must_be_a_member():
    err = error_of(["gpu0", "gpu1"], kind="broadcast", root="gpu3")
    assert err.field == "collective.root" and "gpu0, gpu1" in str(err)


def test_bad_sizes_and_alpha():
    assert error_of(["gpu0", "gpu1"], nbytes=-1).field == "collective.nbytes"
    assert error_of(["gpu0", "gpu1"], alpha=-1e-6).field == "collective.alpha"
    err = error_of(["gpu0", "gpu1"], alpha={"intra": 1e-6})
    assert err.field == "collective.alpha.intra" and "intra_node, inter_node" in str(err)


def test_direct_fabric_accepts_any_names():
    call(["a", "b", "c"], fabric=lambda env: DirectFabric(env, Recorder(), 1e10, 0.0))
