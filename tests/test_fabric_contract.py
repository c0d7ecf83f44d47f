"""Every registered network model keeps the Fabric contract declared on network/base.py:
a graph with its router, or a bandwidth and latency without one; an idle transfer that
lands when ``fixed_time`` says, whenever ``fixed_time`` knows it; and ``shares_links``
False only where an idle transfer is never slowed."""

from __future__ import annotations

import pytest
import simpy

from clustersim.network import NETWORK_MODELS, build_fabric
from clustersim.network.base import Fabric
from clustersim.record import Recorder
from clustersim.topology import Router, build_topology

from .test_topology import cluster


@pytest.mark.parametrize("kind", list(NETWORK_MODELS))
def test_every_network_model_keeps_the_fabric_contract(kind):
    graph = build_topology(cluster(2, 4, {"kind": "fat_tree"}))
    env = simpy.Environment()
    fabric = build_fabric(kind, env, Recorder(), graph)
    assert isinstance(fabric, Fabric)
    assert fabric.graph is graph and isinstance(fabric.router, Router)
    ends = []
    for dst, nbytes in (("gpu1", 1 << 20), ("gpu5", 3 << 20)):  # in the server, across servers
        known = fabric.fixed_time("gpu0", dst, nbytes)
        start = env.now
        env.run(fabric.transfer("gpu0", dst, nbytes))
        ends.append(env.now - start)
        if known is not None:
            assert env.now - start == pytest.approx(known, rel=1e-12)
    # an idle transfer costs at least the route's latency + bytes / bottleneck
    for (dst, nbytes), took in zip((("gpu1", 1 << 20), ("gpu5", 3 << 20)), ends, strict=True):
        latency, bottleneck = fabric.router.cost("gpu0", dst)
        assert took >= (latency + nbytes / bottleneck) * (1 - 1e-12)


def test_a_model_receives_the_scenarios_typed_options(monkeypatch):
    """A network model is built from the scenario's typed options (``simulation.chunk_size``,
    ``simulation.max_chunks``), not the raw dict: a registered model sees what the file says."""
    import clustersim as cs
    from clustersim.network.analytical import AnalyticalFabric
    from clustersim.network.base import FabricOptions
    from clustersim.plugins import Plugin

    seen: list[FabricOptions] = []

    def build(env, recorder, graph, options):
        seen.append(options)
        return AnalyticalFabric(env, recorder, graph)

    monkeypatch.setitem(NETWORK_MODELS, "spy", Plugin("spy", "records its options", factory=build))
    sc = cs.load_scenario("scenarios/synthetic-4stage-1f1b.yaml").with_overrides(
        {"simulation.network": "spy", "simulation.chunk_size": "256 KiB", "simulation.max_chunks": 7}
    )
    cs.simulate(sc, progress=False)
    assert seen and set(seen) == {FabricOptions(256 * 1024, 7)}
