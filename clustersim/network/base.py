"""The fabric interface the engine and the collectives talk to.

A fabric moves ``nbytes`` from one topology node to another and tells, by a SimPy event,
when the last byte has arrived. Everything about *how* (routes, chunking, queueing,
contention) stays behind :meth:`Fabric.transfer`, so schedules and collectives never
change when the network model does.

Node names are the topology's: GPU ``i`` of the cluster is ``"gpu{i}"``.

What the engine and the collectives read from a fabric is declared on :class:`Fabric`
(its contract): :meth:`~Fabric.transfer`, :meth:`~Fabric.fixed_time`,
:attr:`~Fabric.shares_links`, and either a topology (:attr:`~Fabric.graph` with its
:attr:`~Fabric.router`) or one :attr:`~Fabric.bandwidth`/:attr:`~Fabric.latency` for
every pair. A new network model subclasses it and provides these.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import simpy

from ..record import Recorder

if TYPE_CHECKING:
    import networkx as nx

    from ..topology.routing import Router


@dataclass(frozen=True)
class FabricOptions:
    """A network model's typed options (``simulation.chunk_size``, ``simulation.max_chunks``),
    read once from the scenario and handed to every model's :meth:`Fabric.build`; a model
    that has no use for one ignores it. ``chunk_size``: bytes per packet-model chunk (None:
    the model's default); ``max_chunks``: the most chunks one message is cut into (None: no
    bound); ``fold_contention``: whether a folded run's twin flows travel as orbits (a model
    that cannot fold them ignores it: :attr:`Fabric.folds_orbits`); ``congestion``: the packet
    model's ECN/DCQCN/PFC (:class:`~clustersim.network.congestion.Congestion`; None: none)."""

    chunk_size: int | None = None
    max_chunks: int | None = None
    #: ``simulation.fold_contention``: a folded run's twin flows as orbits (:mod:`.orbits`)
    fold_contention: bool = False
    congestion: object | None = None


class Fabric(ABC):
    """Base class of network models, and the contract the engine and collectives rely on.

    Subclasses implement :meth:`transfer`; they override :meth:`fixed_time` when a
    transfer's time is known before the run, set :attr:`shares_links` to False when
    flows never slow each other, and set either :attr:`graph` and :attr:`router` (a
    topology-based model) or :attr:`bandwidth` and :attr:`latency` (one link per pair).
    They may record link busy periods by appending span tuples (``kind="link"``,
    ``lane="link"``, device = link name) to ``self.recorder.spans``.
    """

    #: whether concurrent transfers slow each other (False: every transfer takes its idle
    #: time, so traffic that only loads the network — folding's shadows — can be skipped)
    shares_links = True
    #: whether a collective among the GPUs of one host, on links no traffic between hosts
    #: uses, may be timed by its α-β form — what its schedule takes on those links idle —
    #: instead of message by message (:mod:`clustersim.collectives.domain`, docs/fidelity.md):
    #: True where links are shared at flow level (``flow``, the ``balanced`` fidelity); False
    #: where every chunk is simulated on every link (``packet``)
    coarse_collectives = False
    #: whether a folded representative's transfer and its twins' shadows travel as one
    #: orbit (:mod:`clustersim.network.orbits`: ``simulation.fold_contention`` on the ``flow``
    #: model); False: every shadow is a transfer of its own
    folds_orbits = False
    #: whether :meth:`load` skips events :meth:`transfer` would schedule (True for ``flow``):
    #: where it does not, a folded twin's collective runs as the representative's does, so the
    #: events simulated stay those of every transfer (``packet``'s fingerprints)
    loads_without_events = False
    #: whether the model picks each transfer's route at its start by the load on it, among
    #: the routes :meth:`~clustersim.topology.routing.Router.choices` gives (a dragonfly's
    #: ``ugal``: True for ``flow``, which sees every link's flows in flight); a model that
    #: does not is refused an adaptive routing (:func:`~.factory.build_fabric`)
    adaptive_routing = False
    #: the topology transfers run over (:func:`clustersim.topology.build_topology`: GPU
    #: nodes ``gpu{i}`` with a ``host`` attribute, NIC nodes of ``kind`` ``"nic"``, edges
    #: with ``bandwidth`` in bytes/s and ``latency`` in s), or None for a fabric without
    #: one. Collectives read it for hosts, NICs and per-pair link speeds.
    graph: nx.DiGraph | None = None
    #: routes over :attr:`graph` (shortest by hops, ECMP by flow; routes and costs cached),
    #: shared with the collectives so both see the same paths; None without a graph
    router: Router | None = None
    #: without a graph: the bandwidth (bytes/s) and latency (s) of every pair of nodes,
    #: which the collectives' α-β costs then use
    bandwidth: float | None = None
    latency: float | None = None

    def __init__(self, env: simpy.Environment, recorder: Recorder):
        """``env``: the simulation whose events :meth:`transfer` returns; ``recorder``:
        where link spans go."""
        self.env = env
        self.recorder = recorder

    @classmethod
    def build(cls, env: simpy.Environment, recorder: Recorder, graph: nx.DiGraph, options: FabricOptions):
        """The fabric over topology ``graph`` with the scenario's typed ``options`` — how
        :data:`~clustersim.network.factory.NETWORK_MODELS` builds every model (a model whose
        constructor takes options overrides this)."""
        return cls(env, recorder, graph)

    @abstractmethod
    def transfer(self, src: str, dst: str, nbytes: int, label: str = "") -> simpy.Event:
        """Start moving ``nbytes`` from node ``src`` to node ``dst`` now.

        Returns an event that succeeds when the last byte has arrived at ``dst``.
        ``label`` names the flow in link spans (e.g. ``"send F3 s0->s1"``).
        """

    def load(self, src: str, dst: str, nbytes: int, label: str = "") -> None:
        """Move ``nbytes`` from ``src`` to ``dst`` starting now, as :meth:`transfer` does,
        where nothing waits for its arrival (folded twins' sends: traffic that only loads
        the links). A model may then skip the events that would tell of the arrival."""
        self.transfer(src, dst, nbytes, label)

    def fixed_time(self, src: str, dst: str, nbytes: int) -> float | None:
        """The time :meth:`transfer` would take, when it is known before the run (the
        transfer sees no other traffic and schedules exactly one timeout of that delay);
        None when it depends on what else is in flight. The engine then holds a send lane
        for that time itself — the same single event, without a call into the fabric."""
        return None


class DirectFabric(Fabric):
    """Every pair of GPUs joined by its own private link: ``latency + nbytes / bandwidth``.

    No routes, no contention. It is the network of the walking skeleton and a reference
    for tests: the packet and analytical models must agree with it on an idle network
    of one hop.
    """

    shares_links = False

    def __init__(self, env: simpy.Environment, recorder: Recorder, bandwidth: float, latency: float):
        super().__init__(env, recorder)
        self.bandwidth = bandwidth
        self.latency = latency

    def fixed_time(self, src: str, dst: str, nbytes: int) -> float:
        return 0.0 if src == dst else self.latency + nbytes / self.bandwidth

    def transfer(self, src: str, dst: str, nbytes: int, label: str = "") -> simpy.Event:
        return self.env.timeout(self.fixed_time(src, dst, nbytes))
