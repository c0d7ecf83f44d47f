"""The fabric interface the engine and the collectives talk to.

A fabric moves ``nbytes`` from one topology node to another and tells, by a SimPy event,
when the last byte has arrived. Everything about *how* (routes, chunking, queueing,
contention) stays behind :meth:`Fabric.transfer`, so schedules and collectives never
change when the network model does.

Node names are the topology's: GPU ``i`` of the cluster is ``"gpu{i}"``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import simpy

from ..trace.recorder import Recorder


class Fabric(ABC):
    """Base class of network models.

    Subclasses implement :meth:`transfer`. They may record link busy periods by appending
    span tuples (``kind="link"``, ``lane="link"``, device = link name) to
    ``self.recorder.spans``.
    """

    #: whether concurrent transfers slow each other (False: every transfer takes its idle
    #: time, so traffic that only loads the network — folding's shadows — can be skipped)
    shares_links = True

    def __init__(self, env: simpy.Environment, recorder: Recorder):
        self.env = env
        self.recorder = recorder

    @abstractmethod
    def transfer(self, src: str, dst: str, nbytes: int, label: str = "") -> simpy.Event:
        """Start moving ``nbytes`` from node ``src`` to node ``dst`` now.

        Returns an event that succeeds when the last byte has arrived at ``dst``.
        ``label`` names the flow in link spans (e.g. ``"send F3 s0->s1"``).
        """

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
