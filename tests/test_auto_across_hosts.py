"""``auto`` across hosts picks among what NCCL could run there: never ``direct`` nor
``halving_doubling`` for an all-reduce, reduce-scatter, all-gather or barrier spanning hosts.

NCCL's algorithms are tree, ring, CollNet (direct and chain: reductions in the switch),
NVLS, NVLS-tree and PAT (NVIDIA/nccl ``src/include/plugin/nccl_tuner.h``, ``NCCL_ALGO_*``);
none sends every rank's shard straight to every other rank across nodes, nor exchanges halves
with a partner at doubling distances. Inside one host (NVSwitch) both stay eligible, and direct
for all-to-all (grouped ``ncclSend``/``ncclRecv``) across hosts too.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import simpy

from clustersim.collectives import ALGORITHMS, Group
from clustersim.collectives.registry import may_choose, per_host, plan
from clustersim.topology import build_topology

from .test_collectives_topology import cluster

ACROSS = ("all_reduce", "reduce_scatter", "all_gather", "barrier")


def group(nodes: int, per_node: int = 8) -> Group:
    graph = build_topology(cluster(nodes))
    members = [f"gpu{8 * h + i}" for h in range(nodes) for i in range(per_node)]
    return Group(simpy.Environment(), SimpleNamespace(graph=graph), members)


@pytest.mark.parametrize("kind", ACROSS)
@pytest.mark.parametrize("nodes,per_node", [(2, 8), (4, 1), (16, 1), (3, 2)])
@pytest.mark.parametrize("nbytes", [0, 1024, 1 << 20, 1 << 30])
def test_auto_never_runs_direct_across_hosts(kind, nodes, per_node, nbytes):
    g = group(nodes, per_node)
    name, _, t = plan(g, kind, nbytes)
    assert name not in ("direct", "halving_doubling")
    # the pick is still the least estimate among what may run
    hosts = per_host(g)
    kind_run = "all_reduce" if kind == "barrier" else kind
    able = [a.name for a in ALGORITHMS.values() if may_choose(a, kind_run, sum(hosts), hosts)]
    assert not {"direct", "halving_doubling"} & set(able) and name in able


def test_direct_stays_eligible_in_one_host_and_for_all_to_all():
    one, two = group(1), group(2)
    direct, hd = ALGORITHMS["direct"], ALGORITHMS["halving_doubling"]
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        assert may_choose(direct, kind, 8, per_host(one)) and may_choose(hd, kind, 8, per_host(one))
        assert not may_choose(direct, kind, 16, per_host(two))
        assert not may_choose(hd, kind, 16, per_host(two))
    assert may_choose(direct, "all_to_all", 16, per_host(two))
    # a small all-reduce in one host: direct's 2α beats the ring's 2(n−1)α, so auto takes it
    assert plan(one, "all_reduce", 1024)[0] == "direct"
    assert plan(two, "all_to_all", 1 << 20)[0] == "direct"
