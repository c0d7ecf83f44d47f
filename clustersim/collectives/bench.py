"""nccl-tests style measurement of one collective on an idle simulated cluster.

:func:`measure` builds the cluster's topology and fabric, runs one collective among all
GPUs and reports time, algorithm bandwidth and bus bandwidth with the nccl-tests
definitions (``algbw = S / t``; ``busbw = algbw × factor``, see :func:`busbw_factor`).
Used by ``benchmarks/bench_collectives.py``, the preset calibration tests and the
calibration table in ``docs/collectives.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from ..hardware.presets import expand_preset
from ..network.base import FabricOptions
from ..network.factory import build_fabric
from ..record import Recorder
from ..topology import build_topology
from ..topology.graph import gpu_names
from .algorithm import Tuning
from .api import check_group, run_collective
from .registry import SELECTORS, plan

#: packet-fabric chunks per message at most; chunk = max(MIN_CHUNK, S / (n · this))
CHUNKS_PER_MESSAGE = 64
MIN_CHUNK = 256 * 1024


def busbw_factor(kind: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor: 2(n−1)/n all-reduce, (n−1)/n gather/scatter/a2a, 1 else."""
    if n <= 1:
        return 1.0
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class Measurement:
    """One row of an nccl-tests table: size (bytes), time (s), algbw and busbw (bytes/s)."""

    nbytes: int
    time_s: float
    algbw: float
    busbw: float
    algorithm: str


def chunk_size_for(nbytes: int, n: int) -> int:
    """Packet chunk that keeps ~CHUNKS_PER_MESSAGE chunks per ring message (bounded events)."""
    return max(MIN_CHUNK, int(nbytes) // (max(1, n) * CHUNKS_PER_MESSAGE))


def measure(
    cluster: dict,
    kind: str,
    nbytes: int,
    algorithm: str = "auto",
    network: str = "packet",
    chunk_size: int | None = None,
    alpha=None,
) -> Measurement:
    """Run ``kind`` of ``nbytes`` among every GPU of ``cluster`` (a resolved cluster dict),
    with its ``collective_alpha``, ``collective_latency`` and ``collective_protocols``."""
    graph = build_topology(cluster)
    members = gpu_names(graph)
    n = len(members)
    env = simpy.Environment()
    chunk = chunk_size or chunk_size_for(nbytes, n)
    fabric = build_fabric(network, env, Recorder(), graph, FabricOptions(chunk))  # analytical ignores it
    tuning = Tuning(
        cluster.get("collective_alpha") if alpha is None else alpha,
        cluster.get("collective_latency", "overlapped"),
        protocols=cluster.get("collective_protocols"),
    )
    name = algorithm
    if algorithm in SELECTORS:
        name = plan(
            check_group(env, fabric, kind, members, nbytes, algorithm, tuning), kind, nbytes, algorithm
        )[0]
    proc = env.process(run_collective(env, fabric, kind, members, nbytes, name, tuning))
    env.run(proc)
    t = env.now
    algbw = nbytes / t if t > 0 else float("inf")
    return Measurement(int(nbytes), t, algbw, algbw * busbw_factor(kind, n), name)


def preset_cluster(preset: str, nodes: int) -> dict:
    """The resolved cluster dict of ``preset`` with ``nodes`` nodes (single_node when 1)."""
    cluster = expand_preset(preset)
    cluster["nodes"] = nodes
    if nodes == 1:
        cluster["topology"] = {"kind": "single_node"}
    return cluster
