"""Builds the fabric a scenario asks for (``simulation.network``) on its topology."""

from __future__ import annotations

import simpy

from ..network.base import DirectFabric, Fabric, FabricOptions
from ..network.factory import build_fabric
from ..record import Recorder


def build_network(job, env: simpy.Environment, recorder: Recorder) -> Fabric:
    """The fabric of a :class:`~clustersim.resolve.Job` on its topology graph (``job.graph``,
    degradation windows applied): GPU ``i`` is topology node ``gpu{i}``."""
    kind = job.simulation.network
    if kind == "direct":
        intra = job.cluster.intra_node
        return DirectFabric(env, recorder, intra.bandwidth * intra.efficiency, intra.latency)
    chunk = job.simulation.chunk_size
    options = FabricOptions(
        int(chunk) if chunk else None, job.simulation.max_chunks, job.simulation.fold_contention
    )
    return build_fabric(kind, env, recorder, job.graph, options)
