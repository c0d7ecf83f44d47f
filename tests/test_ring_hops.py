"""A ring whose members are not neighbours on the topology (issue 31: the α-β ring took every
step's α from the group's first two members): its α-β time is the message-by-message schedule's
on idle links, whatever the hops; and a ``ring`` topology over several servers shares its one
link between two servers among every channel that crosses it (the α-β ring ran 12.7 % under the
flat ring's closed form)."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from clustersim.collectives import run_collective
from clustersim.collectives.algorithm import Tuning
from clustersim.collectives.group import Group
from clustersim.collectives.registry import plan
from clustersim.network.flow import FlowFabric
from clustersim.record import Recorder
from clustersim.topology import build_topology
from clustersim.topology.graph import gpu_names

from .test_topology import cluster

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")
GIB_50 = 50 * 2**30


class PerMessage(FlowFabric):
    """The flow model with every collective run message by message."""

    coarse_collectives = False


def _ring_of_links(links: list[tuple[float, float]]) -> dict:
    """One host of ``len(links)`` GPUs on a bidirectional ring, link i (bandwidth, latency)
    joining gpu i and gpu i+1."""
    n = len(links)
    return cluster(
        1,
        n,
        {
            "kind": "custom",
            "nodes": [],
            "links": [
                {"src": f"gpu{i}", "dst": f"gpu{(i + 1) % n}", "bandwidth": bw, "latency": lat}
                for i, (bw, lat) in enumerate(links)
            ],
        },
    )


def _idle_schedule(graph, members, kind, nbytes, alpha) -> tuple[float, float]:
    """(α-β time, time of the message-by-message ring schedule on idle links)."""
    env = simpy.Environment()
    fabric = PerMessage(env, Recorder(), graph)
    t = plan(Group(env, fabric, members, alpha), kind, nbytes, "ring")[2]
    env.run(env.process(run_collective(env, fabric, kind, members, nbytes, "ring", Tuning(alpha))))
    return t, env.now


def _disjoint(graph, members) -> bool:
    """Whether no link carries two of the ring's hops (else they contend, not idle)."""
    env = simpy.Environment()
    group = Group(env, FlowFabric(env, Recorder(), graph), members)
    seen = set()
    for i, a in enumerate(members):
        nodes = group.path(a, members[(i + 1) % len(members)])[2]
        for link in zip(nodes, nodes[1:], strict=False):
            if link in seen:
                return False
            seen.add(link)
    return True


LINK = st.tuples(st.sampled_from([1e10, 2.5e10, 5e10, 3e11]), st.sampled_from([0.0, 2e-7, 1e-6, 3e-6]))


@given(
    topology=st.one_of(
        st.lists(LINK, min_size=3, max_size=12).map(_ring_of_links),
        st.builds(
            lambda rows, cols, link: cluster(
                1,
                rows * cols,
                {"kind": "torus_2d", "rows": rows, "cols": cols, "bandwidth": link[0], "latency": link[1]},
            ),
            st.integers(2, 4),
            st.integers(2, 4),
            LINK,
        ),
    ),
    pick=st.data(),
    kind=st.sampled_from(KINDS),
    shard=st.integers(1, 4 << 20),
    alpha=st.sampled_from([None, 0.0, 5e-6]),
)
@settings(max_examples=60, deadline=None)
def test_a_ring_of_unlike_hops_takes_its_idle_schedule_time(topology, pick, kind, shard, alpha):
    """Any subset, starting anywhere, of a ring of links of random bandwidths and latencies or
    of a torus: the α-β ring time is the per-message schedule's on idle links (whole shards, as
    a schedule cuts them; a pipelined chain's whole-byte chunks differ by < 1e-6 relative)."""
    graph = build_topology(topology)
    n = len(gpu_names(graph))
    size = pick.draw(st.integers(2, n))
    ranks = sorted(pick.draw(st.permutations(range(n)))[:size])
    start = pick.draw(st.integers(0, size - 1))
    members = [f"gpu{r}" for r in ranks[start:] + ranks[:start]]
    assume(_disjoint(graph, members))
    t, schedule = _idle_schedule(graph, members, kind, shard * size, alpha)
    # A pipelined chain cuts whole-byte chunks: at small sizes that rounding (under a byte per
    # member and step, at the slowest link drawn, 1e10 B/s) exceeds 1e-6 relative.
    assert t == pytest.approx(schedule, rel=1e-6, abs=2 * size / 1e10)


@pytest.mark.parametrize("nbytes, expect_us", [(8, 14.0), (16 << 20, 560.875)])
def test_the_gradient_norm_group_on_a_16_gpu_ring_pays_each_pairs_hops(nbytes, expect_us):
    """Ranks 0, 1, 4, 5, …, 13 of a 16-GPU ring of 50 GiB/s, 500 ns links (ASTRA-sim's matched
    network, docs/interop.md): hops of 1 and 3 links, so 14 steps of on average 2 links' latency
    plus S/8 at 50 GiB/s each — 14 µs, not the first pair's 7 µs (ASTRA-sim, 4 B and 16 MiB: 14.15
    and 561.02 µs; 8 B here, whole bytes a step as the schedule cuts them)."""
    graph = build_topology(cluster(1, 16, {"kind": "ring", "bandwidth": GIB_50, "latency": 500e-9}))
    members = [f"gpu{r}" for r in (0, 1, 4, 5, 8, 9, 12, 13)]
    t, schedule = _idle_schedule(graph, members, "all_reduce", nbytes, 0.0)
    closed = 14 * (2 * 500e-9 + nbytes / 8 / GIB_50)
    assert t == pytest.approx(closed, rel=1e-12)
    assert t == pytest.approx(schedule, rel=1e-12)
    assert closed * 1e6 == pytest.approx(expect_us, abs=5e-4)


def test_a_ring_over_servers_shares_the_one_link_between_two_of_them():
    """8 servers × 8 GPUs on a ``ring`` of equal links (no latency): every channel of the ring
    crosses from one server to the next on the one link between them, so the α-β all-reduce
    is the flat ring's 2(n − 1)/n · S/B, not 7/8 of it (each channel counted at the full link)."""
    cl = cluster(8, 8, {"kind": "ring", "bandwidth": GIB_50, "latency": 0.0})
    graph = build_topology(cl)
    env = simpy.Environment()
    group = Group(env, FlowFabric(env, Recorder(), graph), gpu_names(graph), 0.0)
    assert group.shape().bw_inter == pytest.approx(GIB_50 / 8, rel=1e-15)
    nbytes, n = 1 << 30, 64
    assert plan(group, "all_reduce", nbytes, "ring")[2] == pytest.approx(
        2 * (n - 1) / n * nbytes / GIB_50, rel=1e-12
    )
    # hierarchical: each host's ring, then 8 rings across hosts, all through that one link
    assert plan(group, "all_reduce", nbytes, "hierarchical")[2] == pytest.approx(
        2 * 7 / 8 * nbytes / GIB_50 + 2 * 7 * (nbytes / 64) / (GIB_50 / 8), rel=1e-12
    )
