"""Choosing a network model by name (``simulation.network`` in a scenario).

``NETWORK_MODELS`` maps the scenario word to a fabric class; :func:`build_fabric` builds
one on a topology graph. ``packet`` is the default.
"""

from __future__ import annotations

import networkx as nx
import simpy

from ..plugins import Plugin, Registry
from ..record import Recorder
from .analytical import AnalyticalFabric
from .base import Fabric
from .flow import FlowFabric
from .packet import PacketFabric

#: network model name → plugin whose factory is a Fabric class taking ``(env, recorder, graph, …)``
NETWORK_MODELS: Registry[Plugin] = Registry("network model", "simulation.network")
for _model in (
    Plugin(
        "packet", "store-and-forward chunks on every topology link; contention is real", factory=PacketFabric
    ),
    Plugin(
        "flow",
        "each message a fluid flow on its route, rates max-min fair over the links",
        factory=FlowFabric,
    ),
    Plugin(
        "analytical",
        "latency + bytes / bottleneck bandwidth per message, no contention",
        factory=AnalyticalFabric,
    ),
):
    NETWORK_MODELS.add(_model)
DEFAULT_NETWORK_MODEL = "packet"
#: the topology-based models above plus ``direct``: a private link per GPU pair at the
#: intra-node bandwidth, no topology (``simulation.network``)
NETWORK_MODEL_NAMES = (*NETWORK_MODELS, "direct")
#: one-line description of ``direct`` for ``clustersim list`` (it is built without a topology)
DIRECT_DESCRIPTION = "a private link per GPU pair at the intra-node bandwidth, no topology"


def build_fabric(
    kind: str,
    env: simpy.Environment,
    recorder: Recorder,
    graph: nx.DiGraph,
    chunk_size: int | None = None,
    max_chunks: int | None = None,
) -> Fabric:
    """Build the fabric ``kind`` over ``graph``.

    ``kind`` None means the default (``packet``). ``chunk_size`` (bytes) and
    ``max_chunks`` (per message) apply to the packet model only; None keeps the defaults. An unknown kind is a ScenarioError on
    ``simulation.network`` listing the known ones.
    """
    model = NETWORK_MODELS.lookup(DEFAULT_NETWORK_MODEL if kind is None else kind)
    if model.name == "packet":
        return PacketFabric(env, recorder, graph, chunk_size=chunk_size, max_chunks=max_chunks)
    return model.factory(env, recorder, graph)
