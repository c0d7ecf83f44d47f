"""Builds the fabric a scenario asks for (``simulation.network``) on its topology."""

from __future__ import annotations

import simpy

from ..errors import ScenarioError
from ..network.base import DirectFabric, Fabric, FabricOptions
from ..network.congestion import Congestion
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
        int(chunk) if chunk else None,
        job.simulation.max_chunks,
        fold_contention=job.simulation.fold_contention,
        congestion=congestion_of(job.simulation),
    )
    return build_fabric(kind, env, recorder, job.graph, options)


def congestion_of(simulation) -> Congestion | None:
    """The packet model's congestion control a scenario sets (``simulation.congestion``),
    None where it sets none; ScenarioError where its network model has none."""
    spec = getattr(simulation, "congestion", None)
    if spec is None:
        return None
    if simulation.network != "packet":
        raise ScenarioError(
            "simulation.congestion",
            "set",
            f"ECN, DCQCN and PFC are options of the packet network, not {simulation.network}",
        )
    out = Congestion(spec.ecn_threshold, spec.dcqcn, spec.pfc_xoff, spec.pfc_xon, spec.dcqcn_byte_counter)
    out.check()
    return out
