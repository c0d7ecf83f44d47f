"""Megatron-FSDP's prefetch and reduce-queue rules, on numbers.

Megatron-FSDP (``--use-megatron-fsdp``, ``--data-parallel-sharding-strategy
optim_grads_params``; megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py and
param_and_grad_buffer.py) keeps each FSDP unit's parameters (a TransformerLayer's) in one
bucket, padded to a multiple of the DP group, and all-gathers it straight into the bucket's
buffer, the parameters being views of it — no copy kernels. Two sizes in elements steer it,
both from ``suggested_communication_unit_size`` C (unset: ``max(1e9, 2 × the mean unit's
elements)``):

* **prefetch** (``AllGatherPipeline.all_gather_params``): a unit's pre-forward (pre-backward)
  hook all-gathers its bucket and the next ones in forward (backward) order while the
  buckets taken so far hold fewer than C // 2 elements; with ``fsdp_double_buffer`` at most
  the next unit. Buckets already gathered or in flight are skipped. The gathers are
  ``async_op`` NCCL collectives, which wait for the compute enqueued before them — so a
  gather issued at unit i's hook starts once unit i − 1 has run.
  Megatron-LM's adapter (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py) makes the
  TransformerLayers its only units, so in a transformer of equal layers of over 5e8
  elements C is 2 × a layer, and the budget C // 2 is met by the unit's own (padded) bucket
  (``all_gather_params`` stops at ``all_gather_size >= suggested_AG_prefetch_size``): the
  default prefetches nothing and every gather waits for the layer before it.
* **reduce queue** (``GradReducePipeline.wait_for_previous_grad_reduce``): before a unit's
  reduce-scatter is issued, while the reduce-scatters queued and not yet waited for hold
  more than C elements, the compute stream waits for the oldest.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the floor Megatron-FSDP puts under its default ``suggested_communication_unit_size``
UNIT_FLOOR = 1_000_000_000


@dataclass(frozen=True)
class MegatronFsdp:
    """Megatron-FSDP's settings: ``suggested_communication_unit_size`` (elements; None: its
    default) and ``fsdp_double_buffer``."""

    unit_size: int | None = None
    double_buffer: bool = False

    def communication_unit(self, units: list[int]) -> int:
        """C: the stated size, else ``max(1e9, 2 × (elements of the units // their count))``."""
        if self.unit_size is not None:
            return self.unit_size
        return max(UNIT_FLOOR, sum(units) // len(units) * 2)

    def reach(self, sizes: list[int], i: int, budget: int) -> int:
        """The last unit (index into ``sizes``, one pass's units in the order they run) the
        gather at unit i covers: the next ones while fewer than ``budget`` elements are taken."""
        last, taken = i, sizes[i]
        while last + 1 < len(sizes) and taken < budget and not (self.double_buffer and last > i):
            last += 1
            taken += sizes[last]
        return last


def queue_waits(queued: list[int], capacity: int) -> int:
    """How many of the oldest ``queued`` reduce-scatters (their elements, oldest first) the
    compute stream waits for before the next is issued: while the rest hold more than
    ``capacity``."""
    held, n = sum(queued), 0
    while held > capacity:
        held -= queued[n]
        n += 1
    return n
