"""Loads (flows nothing waits for: folded twins' sends) on the flow model: they share links
exactly as transfers do — every transfer beside them lands at the same float as beside the
same flows run as transfers — with no events of their own arrivals (issue 38 item 2)."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from clustersim.network.flow import FlowFabric
from clustersim.network.packet import PacketFabric
from clustersim.record import Recorder
from clustersim.simpy_fast import scheduled_count
from clustersim.topology import build_topology

from .test_topology import cluster

MiB = 1 << 20

flows = st.lists(
    st.tuples(
        st.integers(0, 15),
        st.integers(0, 15),
        st.integers(0, 3 * MiB),
        st.sampled_from([0.0, 1e-5, 1e-4]),
        st.booleans(),  # a load
    ),
    min_size=1,
    max_size=24,
)


def _run(model, graph, flows, as_loads: bool) -> tuple[list, int]:
    """Each transfer's arrival (None for a load) and the events simulated, the flows marked
    as loads started as loads (``as_loads``) or as transfers."""
    env = simpy.Environment()
    fabric = model(env, Recorder(), graph)
    landed: list = [None] * len(flows)

    def go(i, src, dst, nbytes, at, load):
        yield env.timeout(at)
        if load and as_loads:
            fabric.load(f"gpu{src}", f"gpu{dst}", nbytes)
        else:
            yield fabric.transfer(f"gpu{src}", f"gpu{dst}", nbytes)
            if not load:
                landed[i] = env.now

    for i, f in enumerate(flows):
        env.process(go(i, *f))
    env.run()
    return landed, scheduled_count(env)


@given(flows=flows, oversub=st.sampled_from([1, 2, 4]))
@settings(max_examples=40, deadline=None)
def test_loads_share_links_as_transfers_do(flows, oversub):
    graph = build_topology(cluster(4, 4, {"kind": "fat_tree", "oversubscription": oversub}))
    as_loads, events_loads = _run(FlowFabric, graph, flows, True)
    as_transfers, events_transfers = _run(FlowFabric, graph, flows, False)
    assert [repr(t) for t in as_loads] == [repr(t) for t in as_transfers]
    assert events_loads <= events_transfers


def test_a_load_is_a_transfer_where_the_model_has_no_cheaper_form():
    graph = build_topology(cluster(2, 2))
    few = [(0, 2, MiB, 0.0, True), (1, 3, MiB, 0.0, False)]
    assert _run(PacketFabric, graph, few, True)[0] == _run(PacketFabric, graph, few, False)[0]


@given(
    kind=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]),
    algorithm=st.sampled_from(["direct", "ring", "auto"]),
    nbytes=st.integers(1, 8 * MiB),
    oversub=st.sampled_from([1, 2, 4]),
    shadows=st.integers(1, 3),
)
@settings(max_examples=30, deadline=None)
def test_a_shadow_collective_loads_the_links_as_the_whole_call_does(
    kind, algorithm, nbytes, oversub, shadows
):
    """A call across 4 hosts beside its folded twins' (GPU j of each host, j = 1…): the
    representative's members finish at the same floats whether the twins' calls run whole
    or as shadows (the messages nothing waits for sent as loads), with fewer events."""
    from clustersim.collectives.api import Call, prepare_collective

    assume(not (kind == "all_to_all" and algorithm == "ring"))  # (ring has no all-to-all)
    # a leaf per host and two spines: the groups share the spines' links
    topology = {"kind": "fat_tree", "nodes_per_leaf": 1, "spines": 2, "oversubscription": oversub}
    graph = build_topology(cluster(4, 4, topology))

    def run(as_shadow: bool, merge: bool = True):
        with pytest.MonkeyPatch.context() as patch:
            if not merge:  # every ring message by message (collectives/merged_ring.py)
                patch.setattr(Call, "_merged", lambda self, label: None)
            return run_patched(as_shadow)

    def run_patched(as_shadow: bool):
        env = simpy.Environment()
        fabric = FlowFabric(env, Recorder(), graph)
        calls = [
            prepare_collective(env, fabric, kind, [f"gpu{4 * h + j}" for h in range(4)], nbytes, algorithm)
            for j in range(shadows + 1)
        ]
        own = env.process(calls[0].run())
        for call in calls[1:]:
            env.process(call.run(shadow=as_shadow))
        env.run()
        return own.value, scheduled_count(env)

    (as_shadows, fewer), (whole, _), (each, more) = run(True), run(False), run(False, merge=False)
    assert {m: repr(t) for m, t in as_shadows.items()} == {m: repr(t) for m, t in whole.items()}
    # (a whole ring may run in closed form, a shadow's does not: against the whole calls'
    # messages, each sent, the shadows' loads are fewer events)
    assert all(abs(t - each[m]) <= 1e-12 * each[m] for m, t in whole.items())
    assert fewer <= more
