"""The ``analytical`` network model: latency + bytes / bottleneck bandwidth, no queueing.

A transfer of ``S`` bytes over a route with link latencies ``l_i`` and bandwidths ``B_i``
takes ``Σ l_i + S / min B_i`` — the time of a perfectly pipelined (cut-through) message on
an idle network. Flows never see each other: there is no contention, so it is fast (one
event per message) and fits huge sweeps, but it is optimistic whenever links are shared.
On an idle route it is below the ``packet`` model by exactly the packet model's
store-and-forward pipeline term, ``(h − 1)·c/B`` for ``h`` equal links and chunk ``c``.

Routes are the same as the packet model's (shortest by hops, ECMP by flow); free wires
are skipped. No link spans are recorded (there is no per-link occupancy to report).
Inside a link degradation window the route's rate at each moment is its smallest
(degraded) bandwidth, integrated exactly over time (:mod:`clustersim.network.degradation`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import networkx as nx
import simpy

from ..errors import ScenarioError
from ..record import Recorder
from ..topology.lazy import link_data
from ..topology.routing import Router
from .base import Fabric
from .degradation import finish_time, min_profile, rate_profile


class AnalyticalFabric(Fabric):
    """Contention-free α–β transfers over the routes of a topology graph (module docstring)."""

    shares_links = False

    def __init__(self, env: simpy.Environment, recorder: Recorder, graph: nx.DiGraph):
        super().__init__(env, recorder)
        self.graph = graph
        self.router = Router(graph)
        self._profiles: dict[tuple, list | None] = {}

    def route_cost(self, src: str, dst: str, flow_key: Hashable = None) -> tuple[float, float]:
        """``(latency sum, bottleneck bandwidth)`` of the route from ``src`` to ``dst``."""
        return self.router.cost(src, dst, flow_key)

    def fixed_time(self, src: str, dst: str, nbytes: int, flow_key: Hashable = None) -> float | None:
        """``Σ latency + nbytes / bottleneck bandwidth`` of the route; None when a
        degradation window touches the route (the time then depends on the start)."""
        if nbytes < 0:
            raise ScenarioError("transfer.nbytes", nbytes, "a size ≥ 0 bytes")
        latency, bottleneck = self.route_cost(src, dst, flow_key)
        if self._profile(src, dst, flow_key) is not None:
            return None
        return latency + nbytes / bottleneck

    def transfer(
        self, src: str, dst: str, nbytes: int, label: str = "", flow_key: Hashable = None
    ) -> simpy.Event:
        """Fire after :meth:`fixed_time`, or — inside degradation windows — when the route's
        bottleneck profile has carried the bytes."""
        t = self.fixed_time(src, dst, nbytes, flow_key)
        if t is None:  # a degradation window touches the route
            now = self.env.now
            t = (
                finish_time(
                    self._profile(src, dst, flow_key), now, nbytes, self._windowed(src, dst, flow_key)
                )
                - now
                + self.route_cost(src, dst, flow_key)[0]
            )
        return self.env.timeout(t)

    def _windowed(self, src: str, dst: str, flow_key: Hashable) -> str:
        """The route's links that have degradation windows, for a stall message."""
        links = self.router.links(src, dst, flow_key)
        hit = [f"{u}->{v}" for u, v in links if link_data(self.graph, u, v).get("windows")]
        return f"link {' or '.join(hit)} (on the route {src} → {dst})"

    def _profile(self, src: str, dst: str, flow_key: Hashable) -> list | None:
        """The route's bottleneck bandwidth over time when a degradation window touches it."""
        key = (src, dst, flow_key)
        if key not in self._profiles:
            edges = [link_data(self.graph, u, v) for u, v in self.router.links(src, dst, flow_key)]
            hit = any(e.get("windows") for e in edges)
            self._profiles[key] = (
                min_profile(
                    [
                        rate_profile(e["bandwidth"], e.get("windows", ()))
                        for e in edges
                        if e["bandwidth"] != math.inf
                    ]
                )
                if hit
                else None
            )
        return self._profiles[key]
