"""Builds the fabric a scenario asks for (``simulation.network``) on its topology."""

from __future__ import annotations

import simpy

from ..network.base import DirectFabric, Fabric
from ..network.degradation import apply_degradations
from ..network.factory import NETWORK_MODELS, build_fabric
from ..topology import build_topology
from ..trace.recorder import Recorder

#: the topology-based models of the fabric registry (``packet`` default, ``analytical``),
#: plus ``direct``: a private link per GPU pair at the intra-node bandwidth, no topology.
NETWORK_MODEL_NAMES = (*NETWORK_MODELS, "direct")


def cluster_dict(cluster) -> dict:
    """The resolved cluster section as the plain dict the topology builders take
    (``topology.kind: auto`` is resolved by :func:`clustersim.topology.build_topology`)."""
    return cluster.model_dump()


def build_network(scenario, env: simpy.Environment, recorder: Recorder) -> Fabric:
    """The fabric of ``scenario``: GPU ``i`` is topology node ``gpu{i}``."""
    kind = scenario.simulation.network
    if kind == "direct":
        intra = scenario.cluster.intra_node
        return DirectFabric(env, recorder, intra.bandwidth * intra.efficiency, intra.latency)
    graph = build_topology(cluster_dict(scenario.cluster))
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
