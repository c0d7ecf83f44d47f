"""The ``flow`` network model: each message is a fluid flow, links shared max-min fairly.

Between ``packet`` (every chunk through every FIFO link) and ``analytical`` (no contention)
— the flow-level model of htsim's fluid mode, ASTRA-sim's congestion-aware analytical
backend and SimAI's flow models. Timing assumptions:

* a transfer of ``S`` bytes from ``src`` to ``dst`` is one flow on the route the packet and
  analytical models take (shortest by hops, ECMP by flow; free wires skipped);
* at every moment each flow has one rate, and the rates are the **max-min fair** allocation
  of the links' bandwidths (progressive filling: the link whose bandwidth divided by its
  unfrozen flows is smallest fixes those flows at that share; repeat) — so two flows on one
  link get half each, and a flow bottlenecked elsewhere leaves its unused share to others;
* rates change only when a flow starts or ends, or when a link degradation window
  (:mod:`clustersim.network.degradation`) opens or closes on a link in use; flows that
  start at the same simulated moment are allocated together, once;
* the last byte lands the route's summed latency after the flow has carried its bytes
  (propagation does not hold bandwidth), so on an idle route a transfer takes
  ``Σ latency + S / bottleneck`` — exactly the ``analytical`` model's time.

It sees oversubscription, incast and shared NICs like ``packet`` does, at one or two events
per message instead of one per chunk and hop; it has no store-and-forward pipeline term and
no FIFO order within a link (flows share it at once). No link spans are recorded (a link's
share changes continuously; ``packet`` draws link occupancy).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable

import networkx as nx
import simpy
from simpy.events import Event

from ..errors import ScenarioError
from ..record import Recorder
from ..topology.graph import is_wire
from ..topology.routing import Router
from .base import Fabric
from .degradation import down_for_ever, rate_profile

# Two finish times closer than this (relative) end together: float rounding of
# remaining / rate must not leave a flow a few bytes short for one more event.
_END_RTOL = 1e-12


class _Link:
    """One directed link: its bandwidth (or rate steps over time) and the flows on it."""

    __slots__ = ("name", "bandwidth", "profile", "flows")

    def __init__(self, name: str, bandwidth: float, windows=()):
        self.name, self.bandwidth = name, bandwidth
        #: bandwidth steps ``[(from_s, bytes/s), ...]`` when degradation windows apply
        self.profile = rate_profile(bandwidth, windows) if windows else None
        self.flows: dict[_Flow, None] = {}  # insertion-ordered set: deterministic iteration

    def capacity(self, t: float) -> float:
        """Bandwidth at time ``t``."""
        if self.profile is None:
            return self.bandwidth
        rate = self.profile[0][1]
        for start, r in self.profile:
            if start > t:
                break
            rate = r
        return rate

    def next_change(self, t: float) -> float:
        """The first moment after ``t`` at which the bandwidth steps (inf if none)."""
        if self.profile is not None:
            for start, _ in self.profile:
                if start > t:
                    return start
        return math.inf


class _Flow:
    """One message in flight: its links, bytes left at ``t_ref``, rate, finish and done event."""

    __slots__ = ("links", "remaining", "t_ref", "rate", "end", "version", "latency", "done")

    def __init__(self, links: tuple[_Link, ...], nbytes: int, latency: float, done: Event, now: float):
        self.links, self.remaining, self.latency, self.done = links, float(nbytes), latency, done
        self.t_ref, self.rate, self.end, self.version = now, 0.0, math.inf, 0


def _check_not_dead(flow: _Flow, now: float) -> None:
    """A flow with no bandwidth now waits for a link to step up; if none of its links will
    ever step again, it never finishes: a SimulationStall naming the dead link."""
    dead = next((link for link in flow.links if link.capacity(now) <= 0), None)
    if dead is not None and all(link.next_change(now) == math.inf for link in flow.links):
        raise down_for_ever(f"link {dead.name}", flow.remaining, now)


class FlowFabric(Fabric):
    """Max-min fair fluid flows over the routes of a topology graph (module docstring).

    Max-min rates are independent per connected group of flows (flows joined by shared
    links), so a start or an end re-allocates only the group it touches; every other flow
    keeps its rate and its finish time."""

    def __init__(self, env: simpy.Environment, recorder: Recorder, graph: nx.DiGraph):
        super().__init__(env, recorder)
        self.graph = graph
        self.router = Router(graph)
        self.links: dict[tuple[str, str], _Link] = {}
        self._routes: dict[tuple, tuple[tuple[_Link, ...], float]] = {}
        self._dirty: dict[_Link, None] = {}  # links whose flows changed since the last allocation
        self._ends: list[tuple[float, int, int, _Flow]] = []  # (finish, seq, version, flow), lazy
        self._seq = 0
        self._timer_at = math.inf  # the next scheduled wake-up (finish or bandwidth step)
        self._timer: Event | None = None  # its event: an earlier one supersedes it
        self._pending = False  # an allocation is scheduled for the current moment
        self._profiled: list[_Link] = []  # links with degradation windows (rare: few or none)
        #: rate allocations done so far (benchmarks compare them with packet chunk-hops)
        self.allocations = 0

    def route(self, src: str, dst: str, flow_key: Hashable = None) -> tuple[tuple[_Link, ...], float]:
        """The links (free wires left out) a flow from ``src`` to ``dst`` shares, and the
        route's summed latency."""
        key = (src, dst, flow_key)
        hit = self._routes.get(key)
        if hit is None:
            out, latency = [], 0.0
            for u, v in self.router.links(src, dst, flow_key):
                data = self.graph.edges[u, v]
                latency += data["latency"]
                if is_wire(data) or data["bandwidth"] == math.inf:
                    continue
                link = self.links.get((u, v))
                if link is None:
                    link = self.links[u, v] = _Link(f"{u}->{v}", data["bandwidth"], data.get("windows", ()))
                    if link.profile is not None:
                        self._profiled.append(link)
                out.append(link)
            hit = self._routes[key] = (tuple(out), latency)
        return hit

    def fixed_time(self, src: str, dst: str, nbytes: int) -> float | None:
        """Known up front only for a route that shares no link (latency alone)."""
        if src == dst:
            return 0.0
        links, latency = self.route(src, dst)
        return latency if not links else None

    def transfer(
        self, src: str, dst: str, nbytes: int, label: str = "", flow_key: Hashable = None
    ) -> simpy.Event:
        """Start a flow of ``nbytes`` now; the event fires when its last byte lands."""
        if nbytes < 0:
            raise ScenarioError("transfer.nbytes", nbytes, "a size ≥ 0 bytes")
        env = self.env
        if src == dst:
            return env.timeout(0.0)
        links, latency = self.route(src, dst, flow_key)
        if not links or nbytes == 0:
            return env.timeout(latency)
        flow = _Flow(links, nbytes, latency, Event(env), env.now)
        for link in links:
            link.flows[flow] = None
            self._dirty[link] = None
        if not self._pending:  # allocate once for every flow starting at this moment
            self._pending = True
            env.timeout(0.0).callbacks.append(self._allocate)
        return flow.done

    def _group(self) -> tuple[list[_Link], list[_Flow]]:
        """The links and flows connected (through shared links) to the dirty links."""
        links: dict[_Link, None] = {}
        flows: dict[_Flow, None] = {}
        stack = [link for link in self._dirty if link.flows]
        self._dirty = {}
        for link in stack:
            links[link] = None
        while stack:
            for f in stack.pop().flows:
                if f not in flows:
                    flows[f] = None
                    for other in f.links:
                        if other not in links:
                            links[other] = None
                            stack.append(other)
        return list(links), list(flows)

    def _allocate(self, _event=None) -> None:
        """Max-min fair rates (progressive filling) for the flows connected to what changed,
        their finish times, and one wake-up at the earliest finish or bandwidth step."""
        self._pending = False
        now = self.env.now
        links, flows = self._group()
        if flows:
            self.allocations += 1
        for f in flows:
            f.remaining -= f.rate * (now - f.t_ref)
            f.t_ref = now
        cap = {link: link.capacity(now) for link in links}
        left = {link: len(link.flows) for link in links}
        order = {link: i for i, link in enumerate(links)}
        heap = [(cap[link] / left[link], i, link) for i, link in enumerate(links)]
        heapq.heapify(heap)
        frozen: set[_Flow] = set()
        while heap:
            share, i, link = heapq.heappop(heap)
            if left[link] == 0:
                continue
            fair = max(cap[link], 0.0) / left[link]
            if fair != share:  # stale entry: shares only grow as flows freeze
                heapq.heappush(heap, (fair, i, link))
                continue
            for f in link.flows:
                if f in frozen:
                    continue
                frozen.add(f)
                f.rate = fair
                for other in f.links:
                    cap[other] -= fair
                    left[other] -= 1
                    if other is not link and left[other]:
                        heapq.heappush(heap, (max(cap[other], 0.0) / left[other], order[other], other))
        ends = self._ends
        for f in flows:
            if f.rate <= 0 and f.remaining > 0:
                _check_not_dead(f, now)
            f.end = now + f.remaining / f.rate if f.rate > 0 else math.inf
            f.version += 1
            if f.end != math.inf:
                self._seq += 1
                heapq.heappush(ends, (f.end, self._seq, f.version, f))
        self._arm(now)

    def _arm(self, now: float) -> None:
        """Schedule a wake-up at the earliest finish or bandwidth step, unless one is due
        no later."""
        ends = self._ends
        while ends and ends[0][2] != ends[0][3].version:
            heapq.heappop(ends)  # superseded by a re-allocation
        wake = ends[0][0] if ends else math.inf
        for link in self._stepping():
            wake = min(wake, link.next_change(now))
        if wake < self._timer_at:
            self._timer_at = wake
            self._timer = self.env.timeout(wake - now)
            self._timer.callbacks.append(self._wake)

    def _stepping(self):
        """Links in use whose bandwidth steps over time (degradation windows); only those
        links are looked at, so a run without windows pays nothing per event."""
        return [link for link in self._profiled if link.flows]

    def _wake(self, _event) -> None:
        """A scheduled moment: end the flows that have carried their bytes, re-allocate."""
        now = self.env.now
        # superseded by an earlier wake-up that already ran. Identity, not time: now + (t − now)
        # may round below t, and a wake-up that skipped itself so would strand its flows
        if _event is not self._timer:
            return
        self._timer_at, self._timer = math.inf, None
        ends, limit = self._ends, now * (1 + _END_RTOL)
        while ends and ends[0][0] <= limit:
            _, _, version, f = heapq.heappop(ends)
            if version != f.version:
                continue
            f.version += 1
            for link in f.links:
                del link.flows[f]
                self._dirty[link] = None
            if f.latency > 0:
                self.env.timeout(f.latency).callbacks.append(lambda _e, done=f.done: done.succeed())
            else:
                f.done.succeed()
        for link in self._stepping():
            if link.next_change(now - now * _END_RTOL) <= limit:
                self._dirty[link] = None
        self._allocate()
