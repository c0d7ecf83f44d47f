"""Builds the fabric a scenario asks for (``simulation.network``) on its topology."""

from __future__ import annotations

import simpy

from ..network.base import DirectFabric, Fabric
from ..network.degradation import apply_degradations
from ..network.factory import build_fabric
from ..record import Recorder
from ..topology import build_topology


def build_network(scenario, env: simpy.Environment, recorder: Recorder) -> Fabric:
    """The fabric of ``scenario``: GPU ``i`` is topology node ``gpu{i}``."""
    kind = scenario.simulation.network
    if kind == "direct":
        intra = scenario.cluster.intra_node
        return DirectFabric(env, recorder, intra.bandwidth * intra.efficiency, intra.latency)
    graph = build_topology(scenario.cluster.model_dump())
    apply_degradations(graph, scenario.cluster.link_degradations)
    chunk = scenario.simulation.chunk_size
    return build_fabric(
        kind,
        env,
        recorder,
        graph,
        chunk_size=int(chunk) if chunk else None,
        max_chunks=scenario.simulation.max_chunks,
    )
