"""Which GPU each device of a cluster is, and how fast: ``cluster.node_groups``.

A uniform cluster has ``nodes`` nodes of ``cluster.gpu``. A heterogeneous one lists
``node_groups`` in node order — ``[{nodes: 2, gpu: A100-SXM4-80GB}, {nodes: 2, gpu:
V100-SXM2-32GB, speed: 0.9}]`` — each group ``nodes`` consecutive nodes of one GPU type
(``gpu`` defaults to ``cluster.gpu``) with a speed factor that divides its compute times.
Devices are numbered node by node: device ``d`` sits in node ``d // gpus_per_node``.

Every consumer of per-device hardware (the cost model per GPU type, memory capacity,
peak FLOP/s for MFU, the devices table, the speed factors of the engine) reads it here.
"""

from __future__ import annotations

import math

import numpy as np

from .gpus import GPUSpec, get_gpu


def node_gpus(cluster) -> list[tuple[str, float]]:
    """(GPU name, speed factor) of every node, in node order."""
    if cluster.node_groups is None:
        return [(cluster.gpu, 1.0)] * cluster.nodes
    return [(g.gpu or cluster.gpu, g.speed) for g in cluster.node_groups for _ in range(g.nodes)]


def device_gpus(cluster) -> list[str]:
    """The GPU name of every device (index = device)."""
    return [name for name, _ in node_gpus(cluster) for _ in range(cluster.gpus_per_node)]


def device_speeds(cluster) -> list[float]:
    """The speed factor of every device (1.0 = as the cost model says)."""
    return [speed for _, speed in node_gpus(cluster) for _ in range(cluster.gpus_per_node)]


def gpu_spec(cluster, name: str) -> GPUSpec:
    """The spec of GPU ``name`` on ``cluster``: its custom GPU (``cluster.gpu`` given as a
    mapping) or the catalog's."""
    custom = cluster.custom_gpu
    return custom.spec() if custom is not None and name == custom.name else get_gpu(name)


def device_specs(cluster) -> list[GPUSpec]:
    """The spec of every device's GPU (each GPU type's looked up once: 16,384 devices are
    one or two types)."""
    specs = {name: gpu_spec(cluster, name) for name in gpu_types(cluster)}
    return [specs[name] for name in device_gpus(cluster)]


def device_factors(cluster, num_devices: int) -> np.ndarray:
    """Per-device compute time factors: straggler slowdowns ÷ node-group speed factors."""
    per_device = np.ones(num_devices)  # devices past the GPUs (parameter servers) run at 1
    speeds = device_speeds(cluster)[:num_devices]
    per_device[: len(speeds)] = 1.0 / np.array(speeds, dtype=float)
    for straggler in cluster.stragglers:
        for g in straggler.gpus:
            if g < num_devices:
                per_device[g] *= straggler.slowdown
    return per_device


def device_memory(cluster, num_devices: int, gpus: int) -> list[float]:
    """Memory capacity (bytes) of each of a Program's ``num_devices`` devices: its GPU's
    for the job's first ``gpus`` devices, and unbounded past them (parameter servers:
    hosts, whose memory the ledger tracks but no GPU capacity bounds)."""
    caps = [float(gpu.memory_bytes) for gpu in device_specs(cluster)[:gpus]]
    return caps[:num_devices] + [math.inf] * (num_devices - len(caps))


def _group_gpus(cluster) -> list[tuple[str, float]]:
    """(GPU name, speed factor) of each node group, in node order: what :func:`node_gpus`
    lists node by node, once a group (every group has a node: the schema's bound)."""
    if cluster.node_groups is None:
        return [(cluster.gpu, 1.0)]
    return [(g.gpu or cluster.gpu, g.speed) for g in cluster.node_groups]


def gpu_types(cluster) -> list[str]:
    """The distinct GPU names of the cluster, in node order."""
    return list(dict.fromkeys(name for name, _ in _group_gpus(cluster)))


def heterogeneity(cluster) -> str | None:
    """Why the cluster's devices differ (mixed GPU types, speed factors), or None if uniform."""
    types = gpu_types(cluster)
    if len(types) > 1:
        return f"mixed GPU types ({', '.join(types)})"
    if any(speed != 1.0 for _, speed in _group_gpus(cluster)):
        return "node_groups speed factors"
    return None


def describe(cluster) -> str:
    """A one-line account of the GPUs, e.g. ``16× A100-SXM4-80GB + 16× V100-SXM2-32GB``."""
    counts: dict[str, int] = {}
    for name in device_gpus(cluster):
        counts[name] = counts.get(name, 0) + 1
    return " + ".join(f"{k}× {name}" for name, k in counts.items())
