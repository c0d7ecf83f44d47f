"""How many bytes of training state a checkpoint holds, who writes them, and what a GPU
must receive to take a role.

State is the weights and the optimizer states (gradients are rebuilt by the next
iteration): of each chunk, the bytes the memory model holds on each GPU
(:mod:`clustersim.workload.memory_model`), which also says how ZeRO shards them. Each
shard is written once, by its first copy — the lowest data-parallel replica holding it:

* DDP (``zero: 0``): replica 0 writes the whole state of its (stage, TP rank), as
  ``torch.save`` on data-parallel rank 0 does;
* ZeRO-1/2 and Megatron's distributed optimizer: every replica writes its optimizer
  shard, replica 0 also the weights (DeepSpeed's ``zero_pp_rank_*_optim_states.pt``
  beside rank 0's model states; Megatron-Core's ``distrib_optim`` shards);
* ZeRO-3 and FSDP: every replica writes its shard of both (HSDP: the first shard group);
* expert-parallel experts: the same over the expert-data-parallel group.

So a checkpoint is one copy of the state — 2 + 12 = 14 bytes per parameter for Adam in
mixed precision under every sharding — written as per-rank shards in parallel. A
synthetic model's ``params`` bytes are its whole state, unsharded.
"""

from __future__ import annotations

import numpy as np

from ..workload.memory_model import zero_shards
from ..workload.stage_builder import TrainSetup

#: the static kinds a checkpoint saves (gradients are rebuilt by the next iteration)
STATE_KINDS = ("weights", "optimizer")


def rank_checkpoint_bytes(job) -> np.ndarray:
    """Per device of the :class:`~clustersim.resolve.Job`'s plan, the state bytes it writes
    to one checkpoint (module doc): of each state kind of each of its chunks, its shard if
    it is that shard's first copy, else nothing."""
    plan, costs = job.plan, job.chunk_costs
    if job.model.kind == "synthetic":  # the memory model shards no synthetic state
        zero, shards, expert_shards = 0, 1, 1
    else:
        st = TrainSetup.of(job)
        zero, shards, expert_shards = st.zero, st.shards, st.expert_shards
    out = np.zeros(plan.num_devices)
    for dev in range(plan.num_devices):
        stage, replica, _ = plan.coords(dev)
        edp_rank = plan.expert_coords(dev)[1]
        for k in job.stage_chunks(stage):
            c = costs[k]
            for kind in STATE_KINDS:
                expert = getattr(c.expert_static, kind)
                first = replica < zero_shards(kind, zero, shards)
                first_expert = edp_rank < zero_shards(kind, zero, expert_shards)
                out[dev] += (getattr(c.static, kind) - expert) * first + expert * first_expert
    return out


def checkpoint_bytes(job) -> float:
    """Bytes of one checkpoint of a :class:`~clustersim.resolve.Job`: what its ranks write,
    summed (:func:`rank_checkpoint_bytes`) — every stage's weights and optimizer states,
    once."""
    return float(rank_checkpoint_bytes(job).sum())


def stage_state_bytes(job) -> list[float]:
    """Per pipeline stage, the state bytes one of its GPUs holds (all its model chunks)."""
    costs = job.chunk_costs
    return [
        sum(sum(getattr(costs[k].static, kind) for kind in STATE_KINDS) for k in job.stage_chunks(s))
        for s in range(job.plan.pp)
    ]
