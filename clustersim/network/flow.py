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
from itertools import pairwise

import networkx as nx
import simpy
from simpy.events import Event

from ..errors import ScenarioError
from ..record import Recorder
from ..topology.graph import carries_flows
from ..topology.routing import Router
from .base import Fabric
from .degradation import down_for_ever, rate_profile
from .maxmin import Links
from .orbits import Orbit

# Two finish times closer than this (relative) end together: float rounding of
# remaining / rate must not leave a flow a few bytes short for one more event.
_END_RTOL = 1e-12
#: fewer finish entries than this go on the heap one by one; more, with one heapify
_FEW_ENDS = 64


class _Link:
    """One directed link: its id among the fabric's :class:`~.maxmin.Links`, and its
    bandwidth (or rate steps over time)."""

    __slots__ = ("name", "id", "bandwidth", "profile")

    def __init__(self, name: str, link_id: int, bandwidth: float, windows=()):
        self.name, self.id, self.bandwidth = name, link_id, bandwidth
        #: bandwidth steps ``[(from_s, bytes/s), ...]`` when degradation windows apply
        self.profile = rate_profile(bandwidth, windows) if windows else None

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


def _check_not_dead(links: tuple[_Link, ...], remaining: float, now: float) -> None:
    """A flow with no bandwidth now waits for a link to step up; if none of its links will
    ever step again, it never finishes: a SimulationStall naming the dead link."""
    dead = next((link for link in links if link.capacity(now) <= 0), None)
    if dead is not None and all(link.next_change(now) == math.inf for link in links):
        raise down_for_ever(f"link {dead.name}", remaining, now)


class FlowFabric(Fabric):
    """Max-min fair fluid flows over the routes of a topology graph (module docstring).

    Max-min rates are independent per connected group of flows (flows joined by shared
    links), so a start or an end re-allocates only the group it touches; every other flow
    keeps its rate and its finish time. A flow is a slot: its links in :attr:`net`, its bytes
    left, rate and latency in per-slot lists, its finish an entry of a lazy heap."""

    #: collectives inside one host's private links timed by α-β (docs/fidelity.md)
    coarse_collectives = True
    #: a load is a flow without the events of its arrival (:meth:`load`)
    loads_without_events = True
    #: a transfer's route picked at its start by the flows in flight (:meth:`_pick`)
    adaptive_routing = True

    def __init__(self, env: simpy.Environment, recorder: Recorder, graph: nx.DiGraph):
        super().__init__(env, recorder)
        self.graph = graph
        self.router = Router(graph)
        self.links: dict[tuple[str, str], _Link] = {}
        self.net = Links()
        self._by_id: list[_Link] = []  # link id → link
        self._bandwidth: list[float] = []  # link id → bandwidth (without degradation windows)
        self._hops: dict[tuple[str, str], tuple[float, _Link | None]] = {}  # see _hop
        self._routes: dict[tuple, tuple[tuple[_Link, ...], float, tuple[int, ...]]] = {}
        self._adaptive = getattr(graph.graph.get("waypoints"), "adaptive", False)
        self._candidates: dict[tuple, tuple] = {}  # adaptive: per flow, (route, queue link, hops) each
        self._dirty: dict[int, None] = {}  # ids of links whose flows changed since the last allocation
        # per flow slot: bytes left at t_ref, t_ref, rate, and the allocation stamp of its
        # finish entry (−1: none), which tells a current entry of _ends from a superseded one
        self._remaining: list[float] = []
        self._t_ref: list[float] = []
        self._rate: list[float] = []
        self._stamp: list[int] = []
        self._ends: list[tuple[float, int, int]] = []  # (finish, stamp, slot): a lazy heap
        self._seq = 0
        self._done: list[Event | None] = []  # per slot: the event its last byte fires (None: a load)
        self._latency: list[float] = []  # per slot: its route's summed latency
        self._timer_at = math.inf  # the next scheduled wake-up (finish or bandwidth step)
        self._timer: Event | None = None  # its event: an earlier one supersedes it
        self._pending = False  # an allocation is scheduled for the current moment
        self._profiled: list[_Link] = []  # links with degradation windows (rare: few or none)
        #: rate allocations done so far (benchmarks compare them with packet chunk-hops)
        self.allocations = 0
        #: link id → what holds it in closed form (a merged ring, :mod:`clustersim.collectives.merged_ring`): told
        #: to split before any flow starts on that link
        self._watch: dict[int, object] = {}

    @classmethod
    def build(cls, env, recorder, graph, options):
        """:meth:`Fabric.build`; ``options.fold_contention`` sets :attr:`folds_orbits`."""
        fabric = cls(env, recorder, graph)
        fabric.folds_orbits = options.fold_contention
        return fabric

    def route(self, src: str, dst: str, flow_key: Hashable = None) -> tuple[tuple[_Link, ...], float]:
        """The links (free wires left out) a flow from ``src`` to ``dst`` shares, and the
        route's summed latency."""
        return self._route(src, dst, flow_key)[:2]

    def _route(
        self, src: str, dst: str, flow_key: Hashable
    ) -> tuple[tuple[_Link, ...], float, tuple[int, ...]]:
        key = (src, dst, flow_key)
        hit = self._routes.get(key)
        if hit is None:
            hit = self._routes[key] = self._on(self.router.links(src, dst, flow_key))
        return hit

    def _on(self, hops) -> tuple[tuple[_Link, ...], float, tuple[int, ...]]:
        """The shared links of the route of ``hops``, its summed latency and the links' ids."""
        out, latency = [], 0.0
        for hop in hops:
            lat, link = self._hops.get(hop) or self._hop(*hop)
            latency += lat
            if link is not None:
                out.append(link)
        return tuple(out), latency, tuple(link.id for link in out)

    def _pick(
        self, src: str, dst: str, flow_key: Hashable
    ) -> tuple[tuple[_Link, ...], float, tuple[int, ...]]:
        """The route of a flow starting now under an adaptive routing (a dragonfly's
        ``ugal``, UGAL-L; callers take :meth:`_route` otherwise, with no call more per
        transfer): each route the router offers costs the flows in flight on its link where
        the routes part — the source router's queue toward it — times its length in links;
        the cheapest is taken, the first (minimal) on a tie, so an idle network routes
        minimal (:mod:`clustersim.topology.dragonfly_routing`)."""
        key = (src, dst, flow_key)
        cands = self._candidates.get(key)
        if cands is None:
            cands = self._candidates[key] = self._routes_apart(self.router.choices(src, dst, flow_key))
        best, best_cost = cands[0][0], None
        for route, queue, hops in cands:
            cost = (len(self.net.link_flows[queue]) if queue is not None else 0) * hops
            if best_cost is None or cost < best_cost:
                best, best_cost = route, cost
        return best

    def _routes_apart(self, paths) -> tuple:
        """For each of ``paths`` (node tuples): its route (:meth:`_on`), the id of its first
        shared link where it parts from the others (None: none there) and its length."""
        hops = [tuple(pairwise(p)) for p in paths]
        common = 0
        while all(len(h) > common and h[common] == hops[0][common] for h in hops):
            common += 1
        out = []
        for h in hops:
            link = (self._hops.get(h[common]) or self._hop(*h[common]))[1] if len(h) > common else None
            out.append((self._on(h), None if link is None else link.id, len(h)))
        return tuple(out)

    def _hop(self, u: str, v: str) -> tuple[float, _Link | None]:
        """The latency of the link ``u → v`` and the link flows share (None: a free wire or
        one of infinite bandwidth), read from the graph once."""
        data = self.graph.edges[u, v]
        link = None
        if carries_flows(data):
            link = _Link(f"{u}->{v}", self.net.add_link(), data["bandwidth"], data.get("windows", ()))
            self.links[u, v] = link
            self._by_id.append(link)
            self._bandwidth.append(link.bandwidth)
            if link.profile is not None:
                self._profiled.append(link)
        hop = self._hops[u, v] = (data["latency"], link)
        return hop

    def orbit(self, src: str, dst: str) -> Orbit:
        """A transfer ``src → dst`` as an :class:`~.orbits.Orbit` of one flow (what
        :class:`~.orbits.MirroredFabric` gives with its twins' images)."""
        _, latency, ids = self._route(src, dst, None)
        return Orbit(ids, None, latency)

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
        route = self._pick if self._adaptive else self._route
        links, latency, ids = route(src, dst, flow_key)
        if not links or nbytes == 0:
            return env.timeout(latency)
        done = Event(env)
        self._start(ids, None, nbytes, latency, done)
        return done

    def start_flow(self, ids: tuple[int, ...], weights: tuple[int, ...] | None, latency: float, nbytes: int):
        """Start a flow of ``nbytes`` now on the links ``ids`` (each with its multiplicity in
        ``weights``, None: 1 — :meth:`~.maxmin.Links.add_flow`); the event fires
        ``latency`` after its last byte has left."""
        done = Event(self.env)
        self._start(ids, weights, nbytes, latency, done)
        return done

    def load(self, src: str, dst: str, nbytes: int, label: str = "") -> None:
        """A flow nothing waits for (:meth:`Fabric.load`): it shares its links as any
        other, and its end re-allocates them at the same moment, with no event of its
        arrival (a route of no shared link, or no bytes, loads nothing)."""
        if nbytes < 0:
            raise ScenarioError("transfer.nbytes", nbytes, "a size ≥ 0 bytes")
        if src != dst and nbytes:
            route = self._pick if self._adaptive else self._route
            links, latency, ids = route(src, dst, None)
            if links:
                self._start(ids, None, nbytes, 0.0, None)

    def _start(
        self,
        ids: tuple[int, ...],
        weights: tuple[int, ...] | None,
        nbytes: int,
        latency: float,
        done: Event | None,
    ) -> None:
        """Put a flow of ``nbytes`` on links ``ids`` (multiplicities ``weights``) now, which
        fires ``done`` (None: nothing) ``latency`` after its last byte has left."""
        env = self.env
        if self._watch:  # traffic joins a merged ring's link: it runs message by message from now
            for link in ids:
                holder = self._watch.get(link)
                if holder is not None:
                    holder.split()
        slot = self.net.add_flow(ids, weights)
        if slot == len(self._done):
            for column, value in self._columns():
                column.append(value)
        self._done[slot] = done
        self._latency[slot] = latency
        self._remaining[slot], self._t_ref[slot], self._rate[slot] = float(nbytes), env.now, 0.0
        for link in ids:
            self._dirty[link] = None
        if not self._pending:  # allocate once for every flow starting at this moment
            self._pending = True
            env.timeout(0.0).callbacks.append(self._allocate)

    def idle(self, ids) -> bool:
        """Whether no flow is in flight on the links ``ids``, none is held by a merged ring,
        and none steps its bandwidth over time (degradation windows)."""
        link_flows, by_id, watch = self.net.link_flows, self._by_id, self._watch
        return not any(link_flows[k] or k in watch or by_id[k].profile is not None for k in ids)

    def watch(self, ids, holder) -> None:
        """Hold the links ``ids`` for ``holder`` (:meth:`idle` ones): its ``split()`` is called
        before any flow starts on one of them, or :meth:`unwatch` frees them."""
        for link in ids:
            self._watch[link] = holder

    def unwatch(self, ids) -> None:
        """Free the links ``ids`` a :meth:`watch` held."""
        for link in ids:
            del self._watch[link]

    def bandwidth(self, link: int) -> float:
        """The bandwidth of link ``link`` (an id of :attr:`net`)."""
        return self._bandwidth[link]

    def _columns(self):
        """The per-slot columns, each with the value a new slot starts from."""
        return (
            (self._done, None),
            (self._latency, 0.0),
            (self._remaining, 0.0),
            (self._t_ref, 0.0),
            (self._rate, 0.0),
            (self._stamp, -1),
        )

    def flows(self) -> list[tuple[tuple[_Link, ...], float]]:
        """Each flow in flight: its links and its rate now (for inspection and tests)."""
        by_id = self._by_id
        return [
            (tuple(by_id[link] for link in links), self._rate[slot])
            for slot, links in enumerate(self.net.flow_links)
            if links
        ]

    def _allocate(self, _event=None) -> None:
        """Max-min fair rates (progressive filling) for the flows connected to what changed,
        their finish times, and one wake-up at the earliest finish or bandwidth step."""
        self._pending = False
        now = self.env.now
        links, flows = self.net.group(self._dirty)
        self._dirty = {}
        if flows:
            self.allocations += 1
            rem, rate, t_ref, stamp = self._remaining, self._rate, self._t_ref, self._stamp
            for f in flows:
                rem[f] -= rate[f] * (now - t_ref[f])
                t_ref[f] = now
            if self._profiled:
                by_id = self._by_id
                caps = [by_id[link].capacity(now) for link in links]
            else:
                bandwidth = self._bandwidth
                caps = [bandwidth[link] for link in links]
            slots, rates = self.net.fill(links, caps)
            for f, r in zip(slots, rates, strict=True):
                rate[f] = r
            # flows finishing at one moment end in (allocation, place in the group) order
            entries = []
            for seq, f in enumerate(flows, self._seq):
                r = rate[f]
                stamp[f] = seq
                if r > 0:
                    entries.append((now + rem[f] / r, seq, f))
                elif rem[f] > 0:
                    self._check_not_dead(f, now)
            self._seq += len(flows)
            self._push_ends(entries)
        self._arm(now)

    def _push_ends(self, entries: list[tuple[float, int, int]]) -> None:
        """Put finish entries on the heap: one by one when they are few, else all at once
        (one heapify, the superseded entries dropped when they outnumber the flows)."""
        ends = self._ends
        if len(entries) < _FEW_ENDS:
            for entry in entries:
                heapq.heappush(ends, entry)
            return
        if len(ends) > 2 * len(self._stamp):
            stamp = self._stamp
            ends[:] = [e for e in ends if stamp[e[2]] == e[1]]
        ends.extend(entries)
        heapq.heapify(ends)

    def _check_not_dead(self, slot: int, now: float) -> None:
        """See :func:`_check_not_dead`."""
        links = tuple(self._by_id[link] for link in self.net.flow_links[slot])
        _check_not_dead(links, self._remaining[slot], now)

    def _arm(self, now: float) -> None:
        """Schedule a wake-up at the earliest finish or bandwidth step, unless one is due
        no later."""
        ends, stamp = self._ends, self._stamp
        while ends and ends[0][1] != stamp[ends[0][2]]:
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
        return [link for link in self._profiled if self.net.link_flows[link.id]]

    def _wake(self, _event) -> None:
        """A scheduled moment: end the flows that have carried their bytes (earliest finish
        first, ties in allocation order), re-allocate."""
        now = self.env.now
        # superseded by an earlier wake-up that already ran. Identity, not time: now + (t − now)
        # may round below t, and a wake-up that skipped itself so would strand its flows
        if _event is not self._timer:
            return
        self._timer_at, self._timer = math.inf, None
        ends, stamp, limit = self._ends, self._stamp, now * (1 + _END_RTOL)
        while ends and ends[0][0] <= limit:
            _, seq, slot = heapq.heappop(ends)
            if seq != stamp[slot]:
                continue
            stamp[slot] = -1
            for link in self.net.remove_flow(slot):
                self._dirty[link] = None
            done, self._done[slot] = self._done[slot], None
            if done is None:  # a load: nothing waits for its arrival
                continue
            if self._latency[slot] > 0:
                self.env.timeout(self._latency[slot]).callbacks.append(lambda _e, done=done: done.succeed())
            else:
                done.succeed()
        for link in self._stepping():
            if link.next_change(now - now * _END_RTOL) <= limit:
                self._dirty[link.id] = None
        self._allocate()
