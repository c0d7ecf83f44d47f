"""The ``packet`` network model: messages move as chunks, hop by hop, through FIFO links.

Timing assumptions (per directed link of the topology):

* **store-and-forward per chunk** — a chunk must have fully arrived at a node before it
  is sent on the next link;
* **serialization** — a chunk of ``b`` bytes occupies the link for ``b / bandwidth``
  seconds (bandwidth in *bytes*/s; ``"200 Gbit/s"`` was divided by 8 at load); inside a
  degradation window the bandwidth is scaled, exactly over time
  (:mod:`clustersim.network.degradation`);
* **propagation** — it arrives at the far end ``latency`` seconds after leaving; latency
  does not occupy the link, so the next chunk may start at once;
* **FIFO** — each link serves chunks in the order they arrive at it. The sender injects
  a message's next chunk when the previous one has left the first link, so flows that
  share a link interleave chunk by chunk and share its bandwidth.

A message of ``S`` bytes is cut into chunks of ``chunk_size`` (the last one partial). On an
idle route of ``h`` links of equal bandwidth ``B`` and latencies ``l_i``, the last byte
arrives after exactly ``S/B + (h − 1)·c/B + Σ l_i`` where ``c = min(chunk_size, S)`` is the
largest chunk (see ``docs/network.md`` for the derivation).

Each link is a FIFO server computed by Lindley's recursion — a chunk arriving at ``t``
starts at ``max(t, free_at)`` and the link is free again ``b / bandwidth`` later — which
gives exactly the timing of a SimPy process draining a FIFO queue, with one scheduled
event per chunk-hop instead of three or four (put, get, timeout, wake-up). Chunks that
reach the destination before the last one cost no event at all.

Links of infinite bandwidth and zero latency (free wires, e.g. GPU→NIC without PCIe)
are skipped. Busy periods are appended to ``recorder.spans`` as
``(link, "link", "link", label, -1, -1, start, end, bytes, 0.0, "", -1)``; back-to-back chunks of
the same flow on a link extend one span instead of adding another. A span's tuple is
rewritten when it is complete — the flow's last chunk has crossed the link, or another
chunk opened the link's next span — not per chunk, so while a message is still in flight
its open spans read as they were when they opened.
"""

from __future__ import annotations

from collections.abc import Hashable
from heapq import heappop, heappush

import networkx as nx
import simpy
from simpy.events import Event

from ..errors import ScenarioError
from ..record import Recorder
from ..simpy_fast import EVENT, FIRE, NORMAL, TIME, Fired, event_ids, event_queue, set_now, succeed_at
from ..topology.graph import is_wire
from ..topology.routing import Router
from .base import Fabric, FabricOptions
from .degradation import Windows, finish_time, rate_profile

#: Default chunk size: 1 MiB. The pipeline error of store-and-forward is one chunk's
#: serialization per extra hop (42 µs at 200 Gbit/s, 3.5 µs on 300 GB/s NVLink) and a
#: GiB-sized gradient bucket costs ~1024 events per hop. It is also the order of NCCL's
#: own pipelining unit (4 MiB buffers in 512 KiB slices).
DEFAULT_CHUNK_SIZE = 1 << 20

# Two span ends closer than this (relative) are "back to back": float rounding of
# start + service + latency in different orders must not split a flow's span.
_MERGE_RTOL = 1e-12


class _Link:
    """One directed link: its FIFO state (``free_at``) and its last trace span, with
    ``flow`` the flow that may still extend it (None once that flow's last chunk crossed)."""

    __slots__ = (
        "name",
        "bandwidth",
        "latency",
        "profile",
        "free_at",
        "flow",
        "span_idx",
        "span_start",
        "span_end",
        "span_bytes",
    )

    def __init__(self, name: str, bandwidth: float, latency: float, windows: Windows = ()):
        self.name, self.bandwidth, self.latency = name, bandwidth, latency
        #: bandwidth steps over time when degradation windows apply, else None (the fast path)
        self.profile = rate_profile(bandwidth, windows) if windows else None
        self.free_at = 0.0
        self.flow = None
        self.span_idx = -1
        self.span_start = self.span_end = 0.0
        self.span_bytes = 0


class _Flow:
    """One message in flight: its route, bytes not yet injected, its done event, and the
    event it re-arms for each moment its next chunk enters the first link. ``shared`` is
    its fabric's :attr:`PacketFabric.shared`, which its chunk-hops read in one step."""

    __slots__ = ("shared", "links", "last_hop", "remaining", "chunk", "done", "label", "injector")

    def __init__(self, shared: tuple, links: tuple, nbytes: int, chunk: int, done: Event, label: str):
        self.shared, self.links, self.last_hop = shared, links, len(links) - 1
        self.remaining, self.chunk, self.done, self.label = nbytes, chunk, done, label
        injector = self.injector = _Hop(done.env)
        injector.flow, injector.hop, injector.size, injector.last, injector.inject = self, 0, 0, False, True


class _Hop(Fired):
    """A moment of a flow, pushed on SimPy's queue at its time: chunk ``size`` reaches link
    ``hop ≥ 1`` of ``flow``, and/or, with ``inject``, the sender's next chunk enters link 0
    (both at once when link 0 has no latency). A chunk's event is re-armed for each link it
    reaches after the first, and once it has reached the last one it is put aside (``flow``
    None) to carry a later chunk; a flow's injector (``hop`` 0) is re-armed for each chunk
    it sends. Whoever takes one sets all five of its fields."""

    __slots__ = ("env", "callbacks", "flow", "hop", "size", "last", "inject")

    def __init__(self, env: simpy.Environment):
        self.env, self.callbacks = env, FIRE

    def fire(self, now: float, more: bool = True) -> None:
        """At ``now``: the flow's next chunk (``inject``), then this event's own chunk
        (``hop ≥ 1``), each arrives at its link — queued FIFO (Lindley: it starts when the
        link is free), recorded, and its next moment pushed (an entry of SimPy's queue as
        clustersim.simpy_fast describes it). Then, with ``more`` (False: a transfer's first
        chunk, sent from within another event), the same for each hop at the head of the
        queue after it, in queue order, until the head is another kind of event; the clock
        is left at the last one's time. All in one frame: this runs once per chunk-hop."""
        ev, env = self, self.env
        heap, ids, spans, spare = self.flow.shared  # (every flow of the fabric carries the same)
        while True:
            flow = ev.flow
            hop = 0 if ev.inject else ev.hop
            while True:
                if hop:
                    size, last = ev.size, ev.last
                else:  # the next chunk of the message enters the first link
                    size = flow.chunk if flow.remaining > flow.chunk else flow.remaining
                    flow.remaining -= size
                    last = flow.remaining == 0
                    if last:  # no chunk left to inject: drop the flow ↔ injector cycle, so a
                        flow.injector = None  # finished flow is freed at once, not by the collector
                link = flow.links[hop]
                free = link.free_at
                start = free if free > now else now
                end = (
                    start + size / link.bandwidth
                    if link.profile is None
                    else finish_time(link.profile, start, size, f"link {link.name}")
                )
                link.free_at = end
                if size:  # the link's busy span: the flow's open one extended if back to back
                    if link.flow is flow and start - link.span_end <= start * _MERGE_RTOL:
                        link.span_end = end
                        link.span_bytes += size
                        if last:  # the flow's span here is complete (else written when it closes)
                            spans[link.span_idx] = _span(link)
                    else:
                        if link.flow is not None:  # the open span closes: write it as it ended
                            spans[link.span_idx] = _span(link)
                        link.flow, link.span_idx = flow, len(spans)
                        link.span_start, link.span_end, link.span_bytes = start, end, size
                        spans.append(_span(link))
                    if last:  # its span here is complete and written: the link forgets the flow,
                        link.flow = None  # so a finished flow is freed without the collector
                if hop == flow.last_hop:
                    if last:  # the message's last byte lands at end + latency
                        succeed_at(env, flow.done, end + link.latency)
                    if hop:  # this chunk has arrived: its event may carry another one
                        ev.flow = None
                        spare.append(ev)
                    elif not last:  # a one-link route: the next chunk follows when this one has left
                        heappush(heap, (end, NORMAL, next(ids), flow.injector))
                elif hop:  # this chunk goes on to the next link
                    ev.hop, ev.inject = hop + 1, False
                    heappush(heap, (end + link.latency, NORMAL, next(ids), ev))
                else:  # the chunk goes on to link 1; with no latency on link 0 it reaches link
                    # 1 as the next chunk enters link 0, and one event stands for both
                    both = not last and link.latency == 0.0
                    if not last and not both:
                        heappush(heap, (end, NORMAL, next(ids), flow.injector))
                    chunk = spare.pop() if spare else _Hop(env)
                    chunk.flow, chunk.hop, chunk.size, chunk.last, chunk.inject = flow, 1, size, last, both
                    heappush(heap, (end + link.latency, NORMAL, next(ids), chunk))
                if hop or not ev.hop:
                    break
                hop = ev.hop  # the chunk that arrived with the injection
            if not more or not heap:
                break
            ev = heap[0][EVENT]
            if ev.__class__ is not _Hop:
                break
            now = heappop(heap)[TIME]
        set_now(env, now)


def _span(link: _Link) -> tuple:
    """The span tuple (clustersim.record.SPAN_FIELDS) of ``link``'s open busy period."""
    name, label = link.name, link.flow.label
    return (name, "link", "link", label, -1, -1, link.span_start, link.span_end, link.span_bytes, 0.0, "", -1)


class PacketFabric(Fabric):
    """Chunked store-and-forward over the links of a topology graph (module docstring).

    ``graph`` is a topology from :func:`clustersim.topology.build_topology`; routes come
    from a :class:`~clustersim.topology.Router` over it (ECMP by flow).
    """

    @classmethod
    def build(cls, env: simpy.Environment, recorder: Recorder, graph: nx.DiGraph, options: FabricOptions):
        """The packet fabric with the scenario's chunk size and chunk cap — with its
        congestion control when the scenario sets one (:mod:`.congestion`)."""
        if options.congestion is not None:
            from .congestion import CongestionFabric  # (it builds on this module)

            return CongestionFabric(env, recorder, graph, options.congestion, options.chunk_size)
        return cls(env, recorder, graph, chunk_size=options.chunk_size, max_chunks=options.max_chunks)

    def __init__(
        self,
        env: simpy.Environment,
        recorder: Recorder,
        graph: nx.DiGraph,
        chunk_size: int | None = None,
        max_chunks: int | None = None,
    ):
        """``max_chunks`` caps the chunks of one message: a message larger than
        ``chunk_size × max_chunks`` moves in ``max_chunks`` equal chunks instead, which
        bounds the events per message at the cost of up to (hops − 1)/max_chunks of its
        serialization time in extra store-and-forward delay (docs/network.md)."""
        super().__init__(env, recorder)
        if max_chunks is not None and (
            isinstance(max_chunks, bool) or not isinstance(max_chunks, int) or max_chunks < 1
        ):
            raise ScenarioError("simulation.max_chunks", max_chunks, "a whole number ≥ 1, or null for no cap")
        self.max_chunks = max_chunks
        chunk = DEFAULT_CHUNK_SIZE if chunk_size is None else chunk_size
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ScenarioError(
                "simulation.chunk_size", chunk_size, "a whole number of bytes ≥ 1, e.g. 1 MiB"
            )
        self.graph = graph
        self.chunk_size = chunk
        self.router = Router(graph)
        self.links: dict[tuple[str, str], _Link] = {}
        #: chunk services of the transfers started so far (chunks × links); for benchmarks
        self.chunk_hops = 0
        self._routes: dict[tuple, tuple[_Link, ...]] = {}
        #: what every flow's chunk-hops use: SimPy's queue and eid counter, to schedule a
        #: _Hop at its absolute time (its entry as clustersim.simpy_fast describes it), the
        #: recorder's spans, and the chunk events put aside to carry later chunks
        self.shared = (event_queue(env), event_ids(env), recorder.spans, [])

    def route(self, src: str, dst: str, flow_key: Hashable = None) -> tuple[_Link, ...]:
        """The links (free wires left out) a flow from ``src`` to ``dst`` crosses."""
        key = (src, dst, flow_key)
        links = self._routes.get(key)
        if links is None:
            out = []
            for u, v in self.router.links(src, dst, flow_key):
                data = self.graph.edges[u, v]
                if is_wire(data):
                    continue
                link = self.links.get((u, v))
                if link is None:
                    link = self.links[u, v] = _Link(
                        f"{u}->{v}", data["bandwidth"], data["latency"], data.get("windows", ())
                    )
                out.append(link)
            links = self._routes[key] = tuple(out)
        return links

    def transfer(
        self, src: str, dst: str, nbytes: int, label: str = "", flow_key: Hashable = None
    ) -> simpy.Event:
        """Send ``nbytes`` from ``src`` to ``dst``; the event fires when the last byte lands.

        ``flow_key`` (optional) separates flows between the same pair for ECMP; the label
        is only a name in the trace and never changes timing.
        """
        if nbytes < 0:
            raise ScenarioError("transfer.nbytes", nbytes, "a size ≥ 0 bytes")
        links = self._routes.get((src, dst, flow_key))
        if links is None:  # (the route's first flow; a call less for the rest)
            links = self.route(src, dst, flow_key)
        if not links:
            return self.env.timeout(0.0)
        done = Event(self.env)
        chunk = self.chunk_size
        if self.max_chunks is not None and nbytes > chunk * self.max_chunks:
            chunk = -(-int(nbytes) // self.max_chunks)
        flow = _Flow(self.shared, links, int(nbytes), chunk, done, label)
        self.chunk_hops += max(1, -(-flow.remaining // flow.chunk)) * len(links)
        flow.injector.fire(self.env.now, more=False)
        return done
