"""Heterogeneous data-parallel replicas: each prices its chunks on its own GPUs and runs
its own share of the micro-batches.

On a uniform cluster every replica runs the same chunk costs and ``m`` micro-batches. On
a cluster of mixed GPU types (``cluster.node_groups``) the device of (stage s, replica r)
may be an A100 or a V100, so a replica's chunk k is priced by the cost model on the GPU
type of the stage holding it (all TP ranks of a stage-replica sit in one node, hence one
type — :mod:`clustersim.scenario.hetero_rules`). ``parallel.dp_split`` gives replica r
its ``m_r`` micro-batches (Σ m_r = global_batch / micro_batch); all replicas meet at the
gradient all-reduce of each stage, whose bytes are the same for every replica.

``speed`` split: micro-batches go one at a time to the replica whose pipeline would end
first by the estimate ``T_r(m) = Σ_s t_sr + (m − 1)·max_s t_sr`` (a flow shop of equal
jobs; exact for GPipe and 1F1B with free transfers), where ``t_sr`` is the forward +
backward time of stage s's chunks on replica r's slowest GPU of that stage, times its
straggler slowdown, ÷ its node-group speed. Ties go to the lower replica. For ``pp = 1``
this is the integer split minimising ``max_r m_r·t_r``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware.node_groups import device_factors, device_gpus, gpu_types
from ..workload.stage_cost import StageCost
from .plan import Plan


@dataclass(frozen=True)
class ReplicaWork:
    """What one data-parallel replica runs: chunk costs on its GPUs (model order) and its micro-batches."""

    costs: list[StageCost]
    microbatches: int


def needs_replica_work(cluster, parallel) -> bool:
    """Whether replicas differ at compile time (GPU types or micro-batch shares)."""
    return parallel.dp_split != "even" or len(gpu_types(cluster)) > 1


def replica_work(
    cluster, parallel, training, plan: Plan, schedule, by_gpu: dict[str, list[StageCost]], m: int
) -> list[ReplicaWork]:
    """Per replica, its :class:`ReplicaWork` (see the module docstring): ``by_gpu`` holds
    the chunk costs on every GPU type of ``cluster``; ``m`` is the even share of micro-batches."""
    chunks = plan.pp * parallel.virtual_stages
    gpus = device_gpus(cluster)
    costs = [
        [by_gpu[gpus[plan.device(schedule.stage_of(k, plan.pp), r)]][k] for k in range(chunks)]
        for r in range(plan.dp)
    ]
    factors = device_factors(cluster, plan.num_devices)
    step = [
        [
            max(factors[plan.device(s, r, t)] for t in range(plan.tp))
            * sum(
                c.forward + c.backward for k, c in enumerate(costs[r]) if schedule.stage_of(k, plan.pp) == s
            )
            for s in range(plan.pp)
        ]
        for r in range(plan.dp)
    ]
    split = parallel.dp_split
    if split == "even":
        counts = [m] * plan.dp
    elif split == "speed":
        counts = speed_split(step, training.global_batch // training.micro_batch)
        for share in set(counts):
            schedule.validate(plan.pp, share, parallel.virtual_stages)
    else:
        counts = list(split)
    return [ReplicaWork(c, share) for c, share in zip(costs, counts)]


def pipeline_estimate(stage_times: list[float], m: int) -> float:
    """Flow-shop time of ``m`` equal micro-batches through stages of these per-micro-batch times."""
    return sum(stage_times) + (m - 1) * max(stage_times)


def speed_split(stage_times: list[list[float]], total: int) -> list[int]:
    """Micro-batches per replica (each ≥ 1, Σ = ``total``) minimising the slowest replica's
    :func:`pipeline_estimate`; ``stage_times[r]`` are replica r's per-stage times."""
    counts = [1] * len(stage_times)
    for _ in range(total - len(stage_times)):
        r = min(range(len(counts)), key=lambda i: (pipeline_estimate(stage_times[i], counts[i] + 1), i))
        counts[r] += 1
    return counts
