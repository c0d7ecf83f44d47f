"""NCCL's own choice of algorithm and protocol (``simulation.collectives: {kind: nccl}``): a
port of NCCL's tuner, ``src/graph/tuning.cc`` (``ncclTopoTuneModel``, its default tuner
constants, and ``ncclTopoGetAlgoTime``; NVIDIA/nccl master 5067397).

NCCL does not try its algorithms. For every (algorithm, protocol) it fills a latency (µs) and
a bandwidth (GB/s) from the group's shape and constants, and picks the least
``latency + bytes / bandwidth``. This module does the same among the algorithms clustersim
runs as NCCL does — Ring (:mod:`.ring`), Tree (:mod:`.nccl_tree`), NVLS (:mod:`.nvls`, one
host of an NVLink SHARP switch), PAT (:mod:`.pat`, one GPU per host) — and the protocols the
system states (``cluster.collective_protocols``; none stated: Simple). The pair it picks then
runs on the fabric like any other call: the tuner chooses, the simulated schedule times.

What the port keeps from tuning.cc: ``baseLat``, ``hwLat`` (NVLink/PCI/NET) and the latency
forms per algorithm (ring ``(nsteps − nInterSteps)·intraLat + nInterSteps·interLat`` with the
network post overhead, tree ``2·((ppn − 1)·intraLat + log2(nNodes)·interLat)``, NVLS
``intraLat``, PAT ``log2(nNodes)·interLat/3.5 + nRanks·2.8``); the bandwidth refinements (ring
LL ×0.5 capped at ``llMaxBw``, LL128 ×0.92; tree ×0.92, LL ×1/3.8, LL128 ×7/9 or 120/128;
PAT ×0.75; NVLS ``bwIntra·nvlsEfficiency``, ×2 for an all-reduce, ×(ppn − 1)/ppn otherwise);
the bus-to-algorithm bandwidth ratios; the tree's per-size correction factors and the ring's
1.4× plateau latency on several nodes. What it leaves out: the per-channel caps
(``perChMax*Bw`` × nChannels: NCCL's channel count comes from its topology search, not known
here) and NVLS's (nChannels − 1)/nChannels. Where tuning.cc reads the search's graph
bandwidth it reads the group's: intra-host ``B`` per GPU (:class:`~.cost.Shape`), across
hosts the host's network bandwidth ``m·B_net``; the tree on two hosts takes twice that (each
host is the other's only child: tuning.cc reads ``bwIntra`` there).
"""

from __future__ import annotations

import math

from .algorithm import ALGORITHMS
from .group import Group
from .nccl_hardware import generation
from .protocol import Protocol

#: tuning.cc ``baseLatencies`` (µs), per NCCL algorithm, per protocol (LL, LL128, Simple)
BASE_LAT = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
    "nvls": (0.0, 0.0, 0.0),
    "pat": (8.0, 8.0, 8.0),
}
#: tuning.cc ``hwLatencies`` (µs): link kind → algorithm → (LL, LL128, Simple)
HW_LAT = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0, 0, 25), "pat": (0, 0, 4.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0, 0, 0), "pat": (0, 0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14), "ring": (2.7, 4.0, 14.0), "nvls": (0, 0, 18), "pat": (0, 0, 14)},
}
#: tuning.cc ``llMaxBws`` (GB/s): generation → (1 node, 2 nodes, more); one node by GPU
#: generation, several by CPU (Intel's row: the common x86 host)
LL_MAX_BW = {
    "volta": (39.0, 39.0, 20.4),
    "ampere": (87.7, 39.0, 20.4),
    "hopper": (141.0, 39.0, 20.4),
    "blackwell": (2 * 141.0, 39.0, 20.4),
}
#: tuning.cc ``treeCorrectionFactor``: protocol → factor by log2(bytes / 64), 0 … 23
TREE_CORRECTION = {
    "ll": (
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.7,
        0.7,
        0.7,
        0.7,
        0.6,
        0.5,
        0.4,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    "ll128": (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.8,
        0.8,
        0.7,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.8,
        0.9,
        0.9,
        0.9,
        0.9,
        1.0,
        1.0,
        1.0,
    ),
    "simple": (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.7,
        0.8,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
        0.9,
    ),
}
#: NCCL's algorithm → clustersim's (the registry's names)
RUNS_AS = {"ring": "ring", "tree": "nccl_tree", "nvls": "nvls", "pat": "pat"}
_PROTO = {"ll": 0, "ll128": 1, "simple": 2}


def log2i(x: int) -> int:
    """NCCL's ``log2i``: ⌊log2 x⌋ (0 for x ≤ 1)."""
    return max(0, int(x).bit_length() - 1)


def algo_time(group: Group, kind: str, algo: str, proto: str, nbytes: float) -> float | None:
    """NCCL's estimated seconds of ``kind`` by NCCL algorithm ``algo`` and protocol ``proto``
    on ``group`` (module doc), or None where NCCL would not run the pair."""
    sh = group.shape()
    n, nodes, m = sh.n, sh.nodes, sh.m
    p = _PROTO[proto]
    if algo == "tree" and kind != "all_reduce":
        return None
    if algo == "pat" and (kind not in ("reduce_scatter", "all_gather") or proto != "simple" or m != 1):
        return None
    if algo == "nvls" and (proto != "simple" or nodes > 1 or sh.nvls <= 0):
        return None
    gen = generation(group.graph.graph.get("gpu")) if group.graph is not None else None
    intra = "pci" if group.intra_kind() == "pcie" else "nvlink"
    b_intra = sh.bw / 1e9
    b_net = m * sh.net[1] / 1e9  # a host's network bandwidth, GB/s
    nsteps = 2 * (n - 1) if kind == "all_reduce" else n - 1 if kind in ("all_gather", "reduce_scatter") else n
    # the graph's bandwidth (module doc)
    if nodes == 1:
        bw = b_intra
    elif algo == "tree" and nodes == 2:
        bw = min(b_intra, 2 * b_net)
    else:
        bw = min(b_intra, b_net)
    if algo == "nvls":
        bw = b_intra * sh.nvls * (2.0 if kind == "all_reduce" else (m - 1) / m)
    ll_max = LL_MAX_BW.get(gen, LL_MAX_BW["volta"])[min(nodes, 3) - 1]
    if algo == "ring" and proto == "ll":
        bw = min(ll_max, bw * 0.5)
    if algo == "ring" and proto == "ll128":
        bw *= 0.92
    if algo == "tree":
        bw *= 0.92
        if proto == "ll":
            bw = min(bw / 3.8, ll_max)
        elif proto == "ll128":
            bw *= 7.0 / 9.0 if nodes == 1 else 120.0 / 128.0
    if algo == "pat":
        bw *= 0.75
    if not (algo != "ring" and kind in ("all_gather", "reduce_scatter")):
        bw *= n / nsteps if algo in ("ring", "nvls") else 0.5
    intra_lat = HW_LAT[intra][algo][p]
    inter_lat = HW_LAT["net"]["tree" if m == 1 else algo][p]
    lat = BASE_LAT[algo][p]
    if algo == "ring":
        if kind in ("broadcast", "reduce"):
            lat += nsteps * HW_LAT["net" if nodes > 1 else intra]["ring"][p]
        else:
            overhead = (3.0 if proto == "simple" else 1.0) if nodes > 1 else 0.0  # getNetOverhead (x86 Intel)
            inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if kind == "all_reduce" else nodes - 1
            lat += (nsteps - inter_steps) * max(intra_lat, overhead) + inter_steps * inter_lat
        if proto == "simple" and nodes > 1 and kind == "all_reduce" and nbytes / (m * n) >= 64:
            lat *= 1.4  # the ring's plateau effect (channels taken as one per GPU of a host)
    elif algo == "tree":
        lat += 2 * ((m - 1) * intra_lat + log2i(nodes) * inter_lat)
    elif algo == "nvls":
        lat = intra_lat
    else:  # pat
        lat += log2i(nodes) * inter_lat / 3.5 + n * 2.8
    log_size = log2i(int(nbytes) >> 6) if nbytes >= 64 else -1
    if algo == "tree" and 0 <= log_size < 24:
        bw *= TREE_CORRECTION[proto][log_size]
    return (lat + nbytes / (1000 * bw)) * 1e-6


def choose(group: Group, kind: str, nbytes: float) -> tuple[str, Protocol]:
    """NCCL's pick for ``kind`` on ``group``: (clustersim algorithm, the system's protocol)
    of least :func:`algo_time`, among the pairs NCCL would run that clustersim can run here
    (each algorithm's shape and hardware rules). Ties go to the first in NCCL's order (Tree,
    Ring, NVLS, PAT; LL, LL128, Simple). All-to-all is NCCL's point-to-point exchange
    (``direct``)."""
    protocols = {p.name: p for p in group.protocols}
    if kind == "all_to_all":
        return "direct", _simplest(protocols)
    sh, hosts = group.shape(), tuple(len(v) for v in group.hosts.values())
    best, best_t = None, math.inf
    for algo in ("tree", "ring", "nvls", "pat"):
        spec = ALGORITHMS.get(RUNS_AS[algo])
        if spec is None or kind not in spec.kinds:
            continue
        if spec.fits(kind, sh.n, hosts) is not None or spec.hardware(sh, kind) is not None:
            continue
        for proto in ("ll", "ll128", "simple"):
            if proto not in protocols or spec.protocols is not None and proto not in spec.protocols:
                continue
            t = algo_time(group, kind, algo, proto, nbytes)
            if t is not None and t < best_t:
                best, best_t = (RUNS_AS[algo], protocols[proto]), t
    return best or ("ring", _simplest(protocols))


def _simplest(protocols: dict) -> Protocol:
    """The system's Simple protocol (every system runs it), else its first."""
    return protocols.get("simple") or next(iter(protocols.values()))
