"""Collectives inside one host's private links (NVLink domain) timed by their α-β form on
the ``flow`` model (``balanced``): equal to the message-by-message schedule on idle links,
never chosen where traffic between hosts could share a link, and the same iteration as the
per-message run on a shipped balanced scenario (issue 38 item 2)."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import clustersim as cs
from clustersim.collectives import run_collective
from clustersim.collectives.algorithm import Tuning
from clustersim.collectives.domain import in_private_domain
from clustersim.collectives.group import Group
from clustersim.collectives.registry import plan
from clustersim.network.flow import FlowFabric
from clustersim.record import Recorder
from clustersim.topology import build_topology

from .test_topology import cluster

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce")


class PerMessage(FlowFabric):
    """The flow model with every collective run message by message."""

    coarse_collectives = False


@given(
    gpn=st.sampled_from([2, 4, 8]),
    nodes=st.integers(1, 3),
    pick=st.data(),
    kind=st.sampled_from(KINDS),
    shard=st.integers(1, 4 << 20),
    alpha=st.sampled_from([None, 0.0, 5e-6]),
)
@settings(max_examples=60, deadline=None)
def test_the_alpha_beta_time_is_the_idle_schedule(gpn, nodes, pick, kind, shard, alpha):
    """Any group of one host's GPUs, any kind and size (whole shards, as a schedule cuts
    them): the α-β time the run takes equals the per-message schedule on idle links."""
    graph = build_topology(cluster(nodes, gpn))
    host = pick.draw(st.integers(0, nodes - 1))
    size = pick.draw(st.integers(2, gpn))
    members = [f"gpu{host * gpn + j}" for j in sorted(pick.draw(st.permutations(range(gpn)))[:size])]
    env = simpy.Environment()
    fabric = PerMessage(env, Recorder(), graph)
    group = Group(env, fabric, members, alpha)
    assert in_private_domain(group)
    nbytes = shard * size
    _, _, t = plan(group, kind, nbytes)
    proc = env.process(run_collective(env, fabric, kind, members, nbytes, "auto", Tuning(alpha)))
    env.run(proc)
    # (a pipelined chain cuts whole-byte chunks where the α-β form divides the bytes exactly:
    # a few bytes of rounding, < 1e-6 relative — a broadcast of 620,113 × 4 B differs by 3e-7)
    assert t == pytest.approx(env.now, rel=1e-6)


@given(
    nodes=st.integers(2, 4),
    over=st.sampled_from([1, 2, 4]),
    kind=st.sampled_from(KINDS),
    shard=st.integers(1, 4 << 20),
    traffic=st.lists(
        st.tuples(st.integers(0, 15), st.integers(0, 15), st.integers(1, 64 << 20), st.floats(0, 1e-3)),
        max_size=8,
    ),
)
@settings(max_examples=25, deadline=None)
def test_traffic_between_hosts_leaves_a_private_collective_its_idle_time(nodes, over, kind, shard, traffic):
    """Random flows between GPUs of different hosts (any size, start and oversubscription)
    run beside a collective among host 0's GPUs, message by message: it still takes exactly
    its α-β time, so timing it so loses no contention with traffic between hosts."""
    gpn = 4
    graph = build_topology(cluster(nodes, gpn, {"kind": "fat_tree", "oversubscription": over}))
    env = simpy.Environment()
    fabric = PerMessage(env, Recorder(), graph)
    members = [f"gpu{j}" for j in range(gpn)]
    _, _, t = plan(Group(env, fabric, members), kind, shard * gpn)

    def flow(src, dst, nbytes, at):
        yield env.timeout(at)
        yield fabric.transfer(src, dst, nbytes)

    for a, b, nbytes, at in traffic:
        src, dst = a % (nodes * gpn), b % (nodes * gpn)
        if src // gpn != dst // gpn:
            env.process(flow(f"gpu{src}", f"gpu{dst}", nbytes, at))
    proc = env.process(run_collective(env, fabric, kind, members, shard * gpn, "auto", Tuning()))
    env.run(proc)
    assert max(proc.value.values()) == pytest.approx(t, rel=1e-6)  # (whole-byte chunks, as above)


def test_groups_that_cross_hosts_or_share_a_link_with_them_run_message_by_message():
    graph = build_topology(cluster(2, 4))
    env = simpy.Environment()
    fabric = FlowFabric(env, Recorder(), graph)
    assert in_private_domain(Group(env, fabric, ["gpu0", "gpu1", "gpu2"]))
    assert not in_private_domain(Group(env, fabric, ["gpu3", "gpu4"]))  # two hosts
    assert not in_private_domain(Group(env, fabric, ["gpu0"]))  # nothing to send
    # one switch joins every GPU, of both hosts: a host's pair shares it with traffic between hosts
    star = {
        "kind": "custom",
        "nodes": [{"name": "sw", "kind": "switch"}],
        "links": [{"src": f"gpu{i}", "dst": "sw", "bandwidth": 1e10, "latency": 1e-6} for i in range(4)],
    }
    shared = build_topology(cluster(2, 2, star))
    node_host = {n: d.get("host") for n, d in shared.nodes(data=True) if d.get("kind") == "gpu"}
    assert node_host["gpu0"] == node_host["gpu1"] != node_host["gpu2"]
    fabric = FlowFabric(env, Recorder(), shared)
    assert not in_private_domain(Group(env, fabric, ["gpu0", "gpu1"]))


def test_a_shipped_balanced_run_keeps_its_iteration_with_far_fewer_events(monkeypatch):
    """GPT 7.5B on 64 H100 at ``balanced`` (cut to 8 sequences per replica): its TP
    collectives inside each server timed by α-β give the per-message run's iteration time
    (the data-parallel rings between servers run message by message in both) with a
    fraction of its events."""
    sc = cs.load_scenario(ROOT / "scenarios" / "gpt-7.5b-64xh100-balanced.yaml")
    sc = sc.with_overrides({"training.global_batch": 64})
    coarse = cs.simulate(sc, progress=False).summary
    monkeypatch.setattr(FlowFabric, "coarse_collectives", False)
    fine = cs.simulate(sc, progress=False).summary
    assert coarse["iteration_time_s"] == pytest.approx(fine["iteration_time_s"], rel=1e-9)
    assert coarse["sim_events"] * 5 < fine["sim_events"]
