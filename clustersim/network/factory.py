"""Choosing a network model by name (``simulation.network`` in a scenario).

``NETWORK_MODELS`` maps the scenario word to a fabric class; :func:`build_fabric` builds
one on a topology graph. ``packet`` is the default.
"""

from __future__ import annotations

import networkx as nx
import simpy

from ..errors import ScenarioError
from ..plugins import Plugin, Registry
from ..record import Recorder
from .analytical import AnalyticalFabric
from .base import Fabric, FabricOptions
from .flow import FlowFabric
from .packet import PacketFabric

#: network model name → plugin whose factory builds its Fabric from ``(env, recorder, graph,
#: options)`` (:meth:`~clustersim.network.base.Fabric.build`, typed :class:`FabricOptions`)
NETWORK_MODELS: Registry[Plugin] = Registry("network model", "simulation.network")
for _model in (
    Plugin(
        "packet",
        "store-and-forward chunks on every topology link; contention is real",
        factory=PacketFabric.build,
    ),
    Plugin(
        "flow",
        "each message a fluid flow on its route, rates max-min fair over the links",
        factory=FlowFabric.build,
    ),
    Plugin(
        "analytical",
        "latency + bytes / bottleneck bandwidth per message, no contention",
        factory=AnalyticalFabric.build,
    ),
):
    NETWORK_MODELS.add(_model)
DEFAULT_NETWORK_MODEL = "packet"


def network_model_names() -> tuple[str, ...]:
    """What ``simulation.network`` accepts: every registered model (read when asked, so a
    model registered after import is accepted) plus ``direct``, a private link per GPU pair
    at the intra-node bandwidth, no topology."""
    return (*NETWORK_MODELS, "direct")


#: one-line description of ``direct`` for ``clustersim list`` (it is built without a topology)
DIRECT_DESCRIPTION = "a private link per GPU pair at the intra-node bandwidth, no topology"


def build_fabric(
    kind: str | None,
    env: simpy.Environment,
    recorder: Recorder,
    graph: nx.DiGraph,
    options: FabricOptions = FabricOptions(),  # noqa: B008 (frozen: one shared default is safe)
) -> Fabric:
    """Build the fabric ``kind`` over ``graph`` with the scenario's typed ``options``.

    ``kind`` None means the default (``packet``). An unknown kind is a ScenarioError on
    ``simulation.network`` listing the known ones; an adaptive routing (a dragonfly's
    ``ugal``) on a model that cannot pick routes by load one on ``cluster.topology.routing``.
    """
    model = NETWORK_MODELS.lookup(DEFAULT_NETWORK_MODEL if kind is None else kind)
    fabric = model.factory(env, recorder, graph, options)
    policy = graph.graph.get("waypoints") if graph is not None else None
    if getattr(policy, "adaptive", False) and not fabric.adaptive_routing:
        raise ScenarioError(
            "cluster.topology.routing",
            policy.routing,
            f"a routing that picks each flow's route by load needs a network model that sees "
            f"it (simulation.network: flow); {model.name} routes statically — or shortest, minimal, valiant",
        )
    return fabric
