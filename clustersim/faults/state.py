"""How many bytes of training state a checkpoint holds and a GPU must receive to take a role.

State is the weights and the optimizer states (gradients are rebuilt by the next
iteration). Real models take the per-GPU bytes of the memory model
(:mod:`clustersim.workload.memory_model`), which also says how ZeRO shards them; a
synthetic model's ``params`` bytes are its whole state.
"""

from __future__ import annotations

from ..planner import run_chunk_costs
from ..schedules import SCHEDULES
from ..workload.memory_model import zero_shards


def _gpu_state(cost, zero: int, dp: int) -> tuple[float, float]:
    """(weights, optimizer states) bytes of one chunk on one GPU, and their unsharded totals."""
    w, o = cost.static.weights, cost.static.optimizer
    return w + o, w * zero_shards("weights", zero, dp) + o * zero_shards("optimizer", zero, dp)


def checkpoint_bytes(sc) -> float:
    """Bytes of one checkpoint: every stage's weights and optimizer states, once (ZeRO
    shards add up to one copy; data-parallel replicas are not written twice)."""
    tp, dp = sc.parallel.tp, sc.dp
    # the memory model shards a real model's state; a synthetic model's params are per GPU
    zero = sc.parallel.zero if sc.model.kind != "synthetic" else 0
    return float(sum(tp * _gpu_state(c, zero, dp)[1] for c in run_chunk_costs(sc)))


def stage_state_bytes(sc) -> list[float]:
    """Per pipeline stage, the state bytes one of its GPUs holds (all its model chunks)."""
    pp, schedule = sc.parallel.pp, SCHEDULES[sc.parallel.schedule]
    out = [0.0] * pp
    for k, cost in enumerate(run_chunk_costs(sc)):
        out[schedule.stage_of(k, pp)] += _gpu_state(cost, sc.parallel.zero, sc.dp)[0]
    return out
