"""How many bytes of training state a checkpoint holds and a GPU must receive to take a role.

State is the weights and the optimizer states (gradients are rebuilt by the next
iteration). Real models take the per-GPU bytes of the memory model
(:mod:`clustersim.workload.memory_model`), which also says how ZeRO shards them; a
synthetic model's ``params`` bytes are its whole state.
"""

from __future__ import annotations

from ..workload.memory_model import zero_shards


def _gpu_state(cost, zero: int, dp: int) -> tuple[float, float]:
    """(weights, optimizer states) bytes of one chunk on one GPU, and their unsharded totals."""
    w, o = cost.static.weights, cost.static.optimizer
    return w + o, w * zero_shards("weights", zero, dp) + o * zero_shards("optimizer", zero, dp)


def checkpoint_bytes(job) -> float:
    """Bytes of one checkpoint of a :class:`~clustersim.resolve.Job`: every stage's weights
    and optimizer states, once (ZeRO shards add up to one copy; data-parallel replicas are
    not written twice)."""
    tp, dp = job.parallel.tp, job.dp
    # the memory model shards a real model's state; a synthetic model's params are per GPU
    zero = job.parallel.zero if job.model.kind != "synthetic" else 0
    return float(sum(tp * _gpu_state(c, zero, dp)[1] for c in job.chunk_costs))


def stage_state_bytes(job) -> list[float]:
    """Per pipeline stage, the state bytes one of its GPUs holds (all its model chunks)."""
    costs = job.chunk_costs
    return [
        sum(_gpu_state(costs[k], job.parallel.zero, job.dp)[0] for k in job.stage_chunks(s))
        for s in range(job.plan.pp)
    ]
