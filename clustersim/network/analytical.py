"""The ``analytical`` network model: latency + bytes / bottleneck bandwidth, no queueing.

A transfer of ``S`` bytes over a route with link latencies ``l_i`` and bandwidths ``B_i``
takes ``Σ l_i + S / min B_i`` — the time of a perfectly pipelined (cut-through) message on
an idle network. Flows never see each other: there is no contention, so it is fast (one
event per message) and fits huge sweeps, but it is optimistic whenever links are shared.
On an idle route it is below the ``packet`` model by exactly the packet model's
store-and-forward pipeline term, ``(h − 1)·c/B`` for ``h`` equal links and chunk ``c``.

Routes are the same as the packet model's (shortest by hops, ECMP by flow); free wires
are skipped. No link spans are recorded (there is no per-link occupancy to report).
"""

from __future__ import annotations

from collections.abc import Hashable

import networkx as nx
import simpy

from ..errors import ScenarioError
from ..topology.routing import Router
from ..trace.recorder import Recorder
from .base import Fabric


class AnalyticalFabric(Fabric):
    """Contention-free α–β transfers over the routes of a topology graph (module docstring)."""

    shares_links = False

    def __init__(self, env: simpy.Environment, recorder: Recorder, graph: nx.DiGraph):
        super().__init__(env, recorder)
        self.graph = graph
        self.router = Router(graph)

    def route_cost(self, src: str, dst: str, flow_key: Hashable = None) -> tuple[float, float]:
        """``(latency sum, bottleneck bandwidth)`` of the route from ``src`` to ``dst``."""
        return self.router.cost(src, dst, flow_key)

    def fixed_time(self, src: str, dst: str, nbytes: int, flow_key: Hashable = None) -> float:
        """``Σ latency + nbytes / bottleneck bandwidth`` of the route."""
        if nbytes < 0:
            raise ScenarioError("transfer.nbytes", nbytes, "a size ≥ 0 bytes")
        latency, bottleneck = self.route_cost(src, dst, flow_key)
        return latency + nbytes / bottleneck

    def transfer(self, src: str, dst: str, nbytes: int, label: str = "", flow_key: Hashable = None) -> simpy.Event:
        """Fire after :meth:`fixed_time`."""
        return self.env.timeout(self.fixed_time(src, dst, nbytes, flow_key))
