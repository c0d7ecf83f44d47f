"""Builds the fabric a scenario asks for (``simulation.network``) on its topology."""

from __future__ import annotations

import simpy

from ..network.base import DirectFabric, Fabric
from ..trace.recorder import Recorder

#: ``direct``: a private link per GPU pair at the intra-node bandwidth (the skeleton's model);
#: ``packet``: chunked store-and-forward over the topology (default);
#: ``analytical``: route latency + bytes / bottleneck bandwidth, no queueing.
NETWORK_MODEL_NAMES = ("packet", "analytical", "direct")


def cluster_dict(cluster) -> dict:
    """The resolved cluster section as the plain dict the topology builders take.

    ``topology.kind: auto`` (the default) means one NVSwitch node for a single node and a
    fat tree for several.
    """
    out = cluster.model_dump()
    if out["topology"].get("kind", "auto") == "auto":
        out["topology"] = {**out["topology"], "kind": "single_node" if cluster.nodes == 1 else "fat_tree"}
    return out


def build_network(scenario, env: simpy.Environment, recorder: Recorder) -> Fabric:
    """The fabric of ``scenario``: GPU ``i`` is topology node ``gpu{i}``."""
    kind = scenario.simulation.network
    if kind == "direct":
        intra = scenario.cluster.intra_node
        return DirectFabric(env, recorder, intra.bandwidth * intra.efficiency, intra.latency)
    from ..network.factory import build_fabric
    from ..topology import build_topology

    graph = build_topology(cluster_dict(scenario.cluster))
    chunk = scenario.simulation.chunk_size
    return build_fabric(kind, env, recorder, graph, chunk_size=int(chunk) if chunk else None,
                        max_chunks=scenario.simulation.max_chunks)
