"""The α-β cost model's group shape; every algorithm module holds its own closed form
``cost(shape, kind, S, servers) -> seconds`` (registered in
:data:`clustersim.collectives.algorithm.ALGORITHMS`).

Like NCCL's tuner (``src/graph/tuning.cc``), ``auto`` does not try the algorithms: it
evaluates a closed form ``latency + bytes / bandwidth`` per algorithm for the group's
shape and the message size, and takes the smallest. The same closed forms are the
idle-network answers the tests check the simulated schedules against.

Symbols: n ranks on N hosts of m ranks each; S bytes (nccl-tests convention); B the
per-rank intra-host bandwidth; B_net the network bandwidth one rank gets while all m
ranks of its host use the network at once (NIC bandwidth × NICs per host / m); α the
per-step latency (intra-host, network), each including the fabric's path latency.

``latency`` (``cluster.collective_latency``) says how a multi-host ring pays its α's:
``overlapped`` (the default) treats α as a delay that the ring's slack of m steps per host
hides behind the busiest port's work; ``nccl`` adds them in full, as NCCL's tuner does
(``src/graph/tuning.cc``: time = latency + bytes / bandwidth, the ring's latency
(nsteps − nInterSteps)·intraLat + nInterSteps·interLat) — NCCL cuts each step into
slices, so the α's of the n − 1 hops are the pipeline's fill, paid once per collective on
top of the bandwidth-bound steps.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """The parameters of the α-β model for one group (see module doc for symbols)."""

    n: int
    bw: float
    alpha: float
    nodes: int = 1
    bw_inter: float | None = None
    alpha_inter: float | None = None
    latency: str = "overlapped"
    #: one host whose ring hops differ: (α + route latency, route bandwidth) of each hop
    #: in ring order, the last back to the first (:mod:`.ring_hops`); () where all are alike
    hops: tuple[tuple[float, float], ...] = ()
    #: NVLink SHARP's efficiency on the group's switch (NCCL tuning.cc ``nvlsEfficiency``;
    #: :mod:`.nvls`), 0 where it has none (not an NVSwitch of a Hopper or Blackwell system)
    nvls: float = 0.0
    #: the NCCL release the system runs (``cluster.nccl_version``; :mod:`.nccl_version`),
    #: None: the newest mechanics modelled
    nccl_version: str | None = None

    @property
    def m(self) -> int:
        return max(1, self.n // max(1, self.nodes))

    @property
    def net(self) -> tuple[float, float]:
        """(α, B) of a step that crosses the network (intra values on one host)."""
        if self.nodes <= 1:
            return self.alpha, self.bw
        return (
            self.alpha if self.alpha_inter is None else self.alpha_inter,
            self.bw if self.bw_inter is None else self.bw_inter,
        )
