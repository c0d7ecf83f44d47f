"""NCCL's protocols (LL, LL128, Simple): why a collective's cost depends on its size.

NCCL runs every collective with one of three protocols and picks, per call, the
(algorithm, protocol) pair of least *estimated* time (``src/graph/tuning.cc``
``ncclTopoTuneModel`` fills ``latencies`` and ``bandwidths`` per pair;
``ncclTopoGetAlgoTime`` is ``latency + bytes / bandwidth``; ``src/enqueue.cc`` takes the
minimum). The protocols trade latency for bandwidth:

* **LL** — 8-byte lines of 4 data bytes + a 4-byte flag: the lowest latency, half the
  wire carries flags (tuning.cc also caps its ring bandwidth, ``busBw × 1/4`` for
  all-reduce, ``llMaxBws``);
* **LL128** — 128-byte lines with an 8-byte flag (120/128 of the wire, tuning.cc
  ``× 0.92``), capped per channel (``perChMaxRingLL128Bws``);
* **Simple** — the full link bandwidth, with the largest latency: big chunks through a
  deep pipeline of FIFO slots, and all channels are filled only once there is enough data
  (enqueue.cc drops channels while ``nBytes < nChannels · nThreads · threadThreshold``).

clustersim models a protocol as what it does to one collective: ``latency``, that of an
all-reduce (seconds, on top of the algorithm's per-step α; it holds NCCL's ``baseLat``, the
launch and the pipeline fill that nccl-tests times — the presets fit it on all_reduce_perf)
and ``efficiency``, the fraction of the link bandwidth its payload gets. NCCL's tuner pays
``baseLat`` once per call and the rest per ring step (``latencies = baseLat + nsteps ×
hwLat``, ``nsteps`` 2(n − 1) for an all-reduce and n − 1 for an all-gather or a
reduce-scatter). A protocol whose latency was fitted on a ring curve as such a per-step
term (``per_step``: DGX A100's Simple, the fill of its deep FIFO pipeline step after step)
is paid that way: an all-gather or reduce-scatter pays ``baseLat`` and half the rest
(:meth:`Protocol.for_kind`), so a reduce-scatter + all-gather pair costs an all-reduce (its
ring is exactly those two halves) plus one ``baseLat``. Other latencies are paid once per
call by every kind: LL's and LL128's fitted floors (the launch and ``baseLat``), and the
H100 fit, made on an NVLS all-reduce curve (in-switch reduction: no ring steps).
On the fabric a protocol's message occupies the links as
``nbytes / efficiency`` bytes would (flags and partly filled channels take link time), so
contention sees it too; the α-β cost is the algorithm's closed form on those bytes, plus
``latency``. :func:`choose` is NCCL's rule: the least time over the pairs allowed.

The values are per system (``cluster.collective_protocols``; the presets carry a
calibration on nccl-tests curves, :mod:`clustersim.hardware.presets`). Without them a
cluster runs Simple alone at no extra latency — the pure α-β model of the algorithms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

#: NCCL's protocols, in the order ties are broken (NCCL_PROTO_LL, LL128, SIMPLE)
PROTOCOLS = ("ll", "ll128", "simple")

#: NCCL's once-per-call latency of the Ring algorithm per protocol, seconds (tuning.cc
#: ``baseLat[RING]`` in NCCL 2.18–2.19, the version the presets' curves ran: LL 6.6, LL128
#: 14.0, Simple 8.4 µs); the rest of a ``per_step`` latency is paid per ring step
BASE_LATENCY = {"ll": 6.6e-6, "ll128": 14.0e-6, "simple": 8.4e-6}

#: ring steps of a collective over an all-reduce's on the same ranks (tuning.cc ``nsteps``:
#: all-reduce 2(n − 1), all-gather and reduce-scatter n − 1); kinds not named pay in full
STEP_SHARE = {"all_gather": 0.5, "reduce_scatter": 0.5}


@dataclass(frozen=True)
class Protocol:
    """One protocol of a system: ``latency`` (s, an all-reduce's), ``efficiency`` (fraction
    of the link bandwidth its payload gets, 0 < e ≤ 1) and ``per_step``: whether the latency
    beyond NCCL's ``baseLat`` is paid per ring step (module doc)."""

    name: str
    latency: float
    efficiency: float
    per_step: bool = False

    def for_kind(self, kind: str) -> Protocol:
        """This protocol as collective ``kind`` pays it: a ``per_step`` latency as
        :data:`BASE_LATENCY` once and the rest of ``latency`` (an all-reduce's) scaled by
        the kind's ring steps (:data:`STEP_SHARE`); else the whole latency (module doc)."""
        share = STEP_SHARE.get(kind, 1.0)
        if share == 1.0 or not self.per_step:
            return self
        base = min(self.latency, BASE_LATENCY[self.name])
        return Protocol(self.name, base + (self.latency - base) * share, self.efficiency, True)

    def wire_bytes(self, nbytes: float) -> int:
        """The bytes whose link time one ``nbytes`` message of this protocol takes."""
        return int(nbytes) if self.efficiency == 1.0 else math.ceil(nbytes / self.efficiency)


#: the protocol of a cluster that states none: Simple, no latency beyond the algorithm's α
SIMPLE = Protocol("simple", 0.0, 1.0)


def resolve_protocols(spec: Mapping[str, Mapping[str, float]] | Iterable[Protocol] | None) -> tuple:
    """The protocols a cluster's ``collective_protocols`` names (PROTOCOLS order), or
    ``(SIMPLE,)`` for None. Accepts ``{name: {latency, efficiency[, per_step]}}`` — plain dicts (a
    preset) or the scenario's validated ``ProtocolSpec`` — or Protocols."""
    if spec is None:
        return (SIMPLE,)
    if isinstance(spec, Mapping):
        items = [Protocol(name, *_values(v)) for name, v in spec.items()]
    else:
        items = list(spec)
    return tuple(sorted(items, key=lambda p: PROTOCOLS.index(p.name))) or (SIMPLE,)


def _values(v) -> tuple[float, float, bool]:
    if isinstance(v, Mapping):
        return float(v["latency"]), float(v["efficiency"]), bool(v.get("per_step", False))
    return float(v.latency), float(v.efficiency), bool(v.per_step)


def choose(protocols: tuple, nbytes: float, time_of: Callable[[int], float]) -> tuple[Protocol, float]:
    """NCCL's choice: the protocol of least ``latency + time_of(wire bytes)``, and that time
    (ties go to the first in :data:`PROTOCOLS` order)."""
    best, best_t = protocols[0], math.inf
    for p in protocols:
        t = p.latency + time_of(p.wire_bytes(nbytes))
        if t < best_t:
            best, best_t = p, t
    return best, best_t
