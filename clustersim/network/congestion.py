"""RoCE congestion control on the packet model (``simulation.congestion``): ECN marking at
switch queues, DCQCN rate control at the senders, PFC pause frames (lossless links).

Without ``simulation.congestion`` the packet model is :mod:`.packet` unchanged. With it,
:class:`CongestionFabric` moves the same chunks hop by hop through the same FIFO links
(store-and-forward, serialization, propagation: :mod:`.packet`'s timing), and adds:

* **ECN** (``ecn_threshold``, bytes K): a chunk that finds K bytes or more queued ahead of
  it at a link is marked — step marking, as DCTCP and DCQCN deployments configure RED with
  Kmin = Kmax; deterministic, so a run repeats exactly.
* **DCQCN** (``dcqcn: true``; Zhu et al., "Congestion Control for Large-Scale RDMA
  Deployments", SIGCOMM 2015, §3 and Fig. 5): the receiver of a marked chunk returns a CNP
  to the sender (at most one per ``cnp_interval`` per flow: the paper's N = 50 µs), which
  arrives after the route's latency back. The sender's reaction point keeps per
  destination a current rate Rc (line rate to start), a target Rt and α (1 to start); on a
  CNP: Rt = Rc, Rc = Rc·(1 − α/2), α = (1 − g)·α + g; every ``timer`` (55 µs) without one:
  α = (1 − g)·α, then the rate rises — fast recovery Rc = (Rt + Rc)/2 for the first F = 5
  periods, additive increase Rt += R_AI after (g = 1/256, R_AI = 40 Mbit/s: the paper's
  values). The sender injects its next chunk no sooner than size/Rc after the previous one.
  With ``byte_counter`` B (bytes; the paper's 10 MB) the rate also rises every B bytes
  sent, and the stage follows both counters as QCN's reaction point does (IEEE 802.1Qau;
  Linux ``dcbnl.h``: ``rpg_threshold`` is how often the byte or the time stage counts
  before the state advances): fast recovery while both the timer periods T and the byte
  stages BC are ≤ F, additive increase once one passes F, hyper increase Rt += R_HAI once
  both do; every event ends with Rc = (Rt + Rc)/2. Without it recovery is timer-driven
  only (hyper increase needs both counters, so it never comes).
* **PFC** (``pfc_xoff``, ``pfc_xon``, bytes): when a chunk arrives at a link with
  ``pfc_xoff`` bytes or more queued, the link it came over is paused until the queue has
  drained to ``pfc_xon`` — it sends nothing new, whatever flow it belongs to (head-of-line
  blocking: congestion spreads upstream, up to the senders' NICs). Queues never drop.

Per link it records the largest backlog seen (:attr:`CongestionFabric.max_backlog`,
bytes); the marks and CNPs are counted (:attr:`CongestionFabric.marks`, ``cnps``). Link
busy spans are not recorded, and degradation windows are refused.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import networkx as nx
import simpy

from ..errors import ScenarioError
from ..record import Recorder
from ..topology.graph import is_wire
from ..topology.routing import Router
from .base import Fabric
from .packet import DEFAULT_CHUNK_SIZE

#: DCQCN's constants (Zhu et al. 2015, §5 "parameter values"): g, the rate-increase timer
#: (s), fast-recovery periods F, additive increase R_AI (bytes/s), the CNP interval N (s)
DCQCN_G = 1 / 256
DCQCN_TIMER = 55e-6
DCQCN_F = 5
DCQCN_RAI = 40e6 / 8
DCQCN_CNP_INTERVAL = 50e-6
#: hyper increase R_HAI (bytes/s): 10 × R_AI, QCN's ratio (802.1Qau's R_AI 5 Mbit/s,
#: R_HAI 50 Mbit/s; the DCQCN paper's own R_HAI not re-read here); the byte counter B
#: (bytes): 10 MB, as the DCQCN authors' ns-3 code sets it (parameter table of the public
#: sc20anonymous/DCQCN-validation README, which runs it)
DCQCN_RHAI = 10 * DCQCN_RAI
DCQCN_BYTE_COUNTER = 10e6


@dataclass(frozen=True)
class Congestion:
    """The congestion control of a packet fabric (module doc); thresholds in bytes, None
    for off."""

    ecn_threshold: float | None = None
    dcqcn: bool = False
    pfc_xoff: float | None = None
    pfc_xon: float | None = None
    #: DCQCN's byte counter B (bytes): None for timer-driven recovery only
    byte_counter: float | None = None

    def check(self) -> None:
        """ScenarioError on a setting that cannot work."""
        if self.dcqcn and self.ecn_threshold is None:
            raise ScenarioError(
                "simulation.congestion.dcqcn", True, "DCQCN reacts to ECN marks: set ecn_threshold too"
            )
        if self.byte_counter is not None and not (self.dcqcn and self.byte_counter > 0):
            raise ScenarioError(
                "simulation.congestion.dcqcn_byte_counter",
                self.byte_counter,
                "a byte count > 0, with dcqcn: true (it is DCQCN's rate-increase counter)",
            )
        if (self.pfc_xoff is None) != (self.pfc_xon is None):
            raise ScenarioError(
                "simulation.congestion.pfc_xon", self.pfc_xon, "PFC needs both pfc_xoff and pfc_xon"
            )
        if self.pfc_xoff is not None and not 0 <= self.pfc_xon < self.pfc_xoff:
            raise ScenarioError(
                "simulation.congestion.pfc_xon", self.pfc_xon, f"0 ≤ pfc_xon < pfc_xoff ({self.pfc_xoff})"
            )


class _Port:
    """One directed link: its FIFO (``free_at``), the largest backlog seen."""

    __slots__ = ("name", "bandwidth", "latency", "free_at", "max_backlog")

    def __init__(self, name: str, bandwidth: float, latency: float):
        self.name, self.bandwidth, self.latency = name, bandwidth, latency
        self.free_at, self.max_backlog = 0.0, 0.0


class ReactionPoint:
    """A sender's DCQCN state towards one destination (module doc): current rate ``rc``,
    target ``rt``, ``alpha``, the time of the last timer tick applied (or of the last cut),
    the timer periods and byte stages since that cut, and the bytes sent towards the next
    stage (``byte_counter`` None: timer only)."""

    __slots__ = ("line", "rc", "rt", "alpha", "ticked", "periods", "byte_counter", "stages", "sent")

    def __init__(self, line: float, byte_counter: float | None = None):
        self.line, self.rc, self.rt, self.alpha = line, line, line, 1.0
        self.ticked, self.periods = 0.0, 0
        self.byte_counter, self.stages, self.sent = byte_counter, 0, 0.0

    def _increase(self) -> None:
        """One rate-increase event, its stage from both counters (module doc)."""
        if max(self.periods, self.stages) > DCQCN_F:
            step = DCQCN_RHAI if min(self.periods, self.stages) > DCQCN_F else DCQCN_RAI
            self.rt = min(self.line, self.rt + step)
        self.rc = min(self.line, (self.rt + self.rc) / 2)

    def catch_up(self, now: float) -> None:
        """Apply every rate-increase timer period that ended by ``now`` since the last cut."""
        if self.rc >= self.line:
            self.ticked = now
            return
        while self.ticked + DCQCN_TIMER <= now and self.rc < self.line:
            self.ticked += DCQCN_TIMER
            self.alpha *= 1 - DCQCN_G
            self.periods += 1
            self._increase()

    def count(self, nbytes: float, now: float) -> None:
        """``nbytes`` left the sender at ``now``: the timer periods up to then, then one
        rate increase per ``byte_counter`` bytes sent since the last cut."""
        self.catch_up(now)
        if self.byte_counter is None or self.rc >= self.line:
            return
        self.sent += nbytes
        while self.sent >= self.byte_counter and self.rc < self.line:
            self.sent -= self.byte_counter
            self.stages += 1
            self._increase()

    def cnp(self, now: float) -> None:
        """A congestion notification arrived at ``now``: cut the rate."""
        self.catch_up(now)
        self.rt = self.rc
        self.rc *= 1 - self.alpha / 2
        self.alpha = (1 - DCQCN_G) * self.alpha + DCQCN_G
        self.ticked = now
        self.periods = self.stages = 0
        self.sent = 0.0


class CongestionFabric(Fabric):
    """The packet model with ECN, DCQCN and PFC (module doc)."""

    def __init__(
        self,
        env: simpy.Environment,
        recorder: Recorder,
        graph: nx.DiGraph,
        congestion: Congestion,
        chunk_size: int | None = None,
    ):
        super().__init__(env, recorder)
        congestion.check()
        self.graph, self.cc = graph, congestion
        self.chunk_size = DEFAULT_CHUNK_SIZE if chunk_size is None else int(chunk_size)
        self.router = Router(graph)
        self.ports: dict[tuple[str, str], _Port] = {}
        self.senders: dict[tuple[str, str], ReactionPoint] = {}
        self._last_cnp: dict[tuple[str, str], float] = {}
        self.marks = self.cnps = 0

    @property
    def max_backlog(self) -> dict[str, float]:
        """Largest backlog (bytes) each link has held."""
        return {p.name: p.max_backlog for p in self.ports.values()}

    def _route(self, src: str, dst: str, flow_key) -> list[_Port]:
        out = []
        for u, v in self.router.links(src, dst, flow_key):
            data = self.graph.edges[u, v]
            if is_wire(data):
                continue
            if data.get("windows"):
                raise ScenarioError(
                    "simulation.congestion", "set", "congestion control runs without degradation windows"
                )
            port = self.ports.get((u, v))
            if port is None:
                port = self.ports[u, v] = _Port(f"{u}->{v}", data["bandwidth"], data["latency"])
            out.append(port)
        return out

    def transfer(
        self, src: str, dst: str, nbytes: int, label: str = "", flow_key: Hashable = None
    ) -> simpy.Event:
        """Send ``nbytes`` from ``src`` to ``dst``; the event fires when the last byte lands."""
        if nbytes < 0:
            raise ScenarioError("transfer.nbytes", nbytes, "a size ≥ 0 bytes")
        ports = self._route(src, dst, flow_key)
        if not ports:
            return self.env.timeout(0.0)
        done = self.env.event()
        rp = None
        if self.cc.dcqcn:
            rp = self.senders.get((src, dst))
            if rp is None:
                rp = self.senders[src, dst] = ReactionPoint(ports[0].bandwidth, self.cc.byte_counter)
        self._inject((src, dst), ports, int(nbytes), done, rp)
        return done

    def _inject(self, pair, ports, remaining: int, done, rp) -> None:
        """Send the flow's next chunk into its first link, and plan the one after."""
        now = self.env.now
        size = min(self.chunk_size, remaining)
        remaining -= size
        left = self._enter(pair, ports, 0, size, remaining == 0, done, now)
        if rp is not None:
            rp.count(size, now)
        if remaining:
            nxt = left
            if rp is not None:
                nxt = max(nxt, now + size / rp.rc)
            self.env.timeout(nxt - now).callbacks.append(
                lambda _e: self._inject(pair, ports, remaining, done, rp)
            )

    def _enter(
        self, pair, ports, hop: int, size: int, last: bool, done, now: float, marked: bool = False
    ) -> float:
        """Chunk ``size`` reaches link ``hop`` at ``now``: queue, mark, pause upstream, send
        on. Returns when it has left the link."""
        port = ports[hop]
        backlog = max(0.0, port.free_at - now) * port.bandwidth
        port.max_backlog = max(port.max_backlog, backlog)
        cc = self.cc
        if cc.ecn_threshold is not None and backlog >= cc.ecn_threshold and not marked:
            marked = True
            self.marks += 1
        if cc.pfc_xoff is not None and hop and backlog >= cc.pfc_xoff:
            # pause the link it came over until this queue has drained to Xon
            upstream = ports[hop - 1]
            upstream.free_at = max(upstream.free_at, port.free_at - cc.pfc_xon / port.bandwidth)
        start = max(now, port.free_at)
        end = port.free_at = start + size / port.bandwidth
        arrive = end + port.latency
        if hop + 1 < len(ports):
            self.env.timeout(arrive - now).callbacks.append(
                lambda _e: self._enter(pair, ports, hop + 1, size, last, done, self.env.now, marked)
            )
        else:
            self.env.timeout(arrive - now).callbacks.append(
                lambda _e: self._land(pair, ports, last, done, marked)
            )
        return end

    def _land(self, pair, ports, last: bool, done, marked: bool) -> None:
        """A chunk arrived: answer a mark with a CNP (DCQCN), finish the flow on its last."""
        now = self.env.now
        if marked and self.cc.dcqcn and now - self._last_cnp.get(pair, -1.0) >= DCQCN_CNP_INTERVAL:
            self._last_cnp[pair] = now
            self.cnps += 1
            back = sum(p.latency for p in ports)  # the CNP's way back: the route's latency
            rp = self.senders[pair]
            self.env.timeout(back).callbacks.append(lambda _e: rp.cnp(self.env.now))
        if last:
            done.succeed(now)
